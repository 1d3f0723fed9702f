#!/usr/bin/env bash
# tests/cuda/sass_budget.sh OBJDIR: the CUDA kernels' static budget, read
# from the sm_90 machine code (cuobjdump -sass) of OBJDIR/mm.cu.o and
# attn.cu.o; needs no GPU (make test runs it in CUDA builds).
#  - the quantized matrix-vector kernels (mm.cu mv_q, one activation row):
#    instructions in the loop over a row's positions per weight it covers
#    (MVQ_R rows times the weights of a position, mvq.cuh): q4_K at most 4,
#    q8_0 at most 3, q4_0/q5_K/q6_K at most 4; issue #37's formats: q4_1 3,
#    q5_0/q5_1/q2_K 4, q3_K 5, iq4_nl/iq4_xs 6 (their levels looked up
#    with byte permutes);
#  - decode attention (attn.cu attn_dec_k): its loop over the context reads K
#    and V rows with 128-bit loads (LDG.E.128: at least K and V of the two
#    keys a lane group has in flight).
# The loop is the backward branch of the function whose span holds the most
# global loads (then the widest). cuobjdump (and the
# nvdisasm it calls) from $CUOBJDUMP, the PATH or build/sass-tools (make
# installs it there from PyPI). Ends with "N passed, N failed".
set -u -o pipefail
cd "$(dirname "$0")/../.." || exit 1
objdir=${1:-build/cuda/kernels/cuda}
tool=${CUOBJDUMP:-$(command -v cuobjdump || echo build/sass-tools/nvidia/cu13/bin/cuobjdump)}
if [ ! -x "$tool" ]; then
	echo "$0: FAIL: no cuobjdump (install the CUDA toolkit's, or make build/sass-tools/.installed)"
	echo "$0: 0 passed, 1 failed"
	exit 1
fi
export PATH=$(dirname "$tool"):$PATH
mvq_r=$(sed -n 's/^#define MVQ_R \([0-9]*\).*/\1/p' kernels/cuda/mm.cu)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for o in mm attn; do
	if ! "$tool" -sass -arch sm_90 "$objdir/$o.cu.o" >"$tmp/$o.sass" 2>"$tmp/err" || [ ! -s "$tmp/$o.sass" ]; then
		echo "$0: FAIL: no sm_90 code in $objdir/$o.cu.o ($(head -1 "$tmp/err"); build with sm_90 in CUDA_ARCH)"
		echo "$0: 0 passed, 1 failed"
		exit 1
	fi
done
python3 - "$tmp" "$mvq_r" "$0" <<'EOF'
import re, sys
from collections import Counter
tmp, R, me = sys.argv[1], int(sys.argv[2]), sys.argv[3]

def functions(path):
    out = {}
    for f in re.split(r'\n\s*Function : ', open(path).read())[1:]:
        ins = []
        for line in f.split('\n'):
            m = re.match(r'\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;', line)
            if m:
                ins.append((int(m.group(1), 16), m.group(2)))
        out[f.split('\n')[0].strip()] = ins
    return out

def op(t):
    w = t.split()
    return w[1] if w[0].startswith('@') else w[0]

def loop(ins):
    """The instructions of the backward branch's span with the most global
    loads (then the widest), NOPs left out."""
    at = {a: i for i, (a, _) in enumerate(ins)}
    best = None
    for i, (a, t) in enumerate(ins):
        m = re.search(r'\bBRA\b.*?0x([0-9a-f]+)', t)
        if m and int(m.group(1), 16) < a and int(m.group(1), 16) in at:
            span = (at[int(m.group(1), 16)], i)
            key = (sum(1 for _, x in ins[span[0]:i + 1] if op(x).startswith("LDG")), i - span[0])
            if best is None or key > best[0]:
                best = (key, span)
    best = best and best[1]
    if best is None:
        return []
    return [t for _, t in ins[best[0]:best[1] + 1] if not t.split()[0].startswith('NOP')]

passed = failed = 0
def check(ok, msg):
    global passed, failed
    print("%s: %s%s" % (me, "" if ok else "FAIL: ", msg))
    passed += ok
    failed += not ok

mm = functions(tmp + "/mm.sass")
# weight type (kernels/dtype.h), weights per position (mvq.cuh), budget
for name, wt, per, budget in (("q4_K", 12, 32, 4), ("q8_0", 8, 16, 3), ("q6_K", 14, 32, 4),
                              ("q5_K", 13, 32, 4), ("q4_0", 2, 32, 4), ("q4_1", 3, 32, 3),
                              ("q5_0", 6, 32, 4), ("q5_1", 7, 32, 4), ("iq4_nl", 20, 32, 6), ("q2_K", 10, 32, 4),
                              ("q3_K", 11, 32, 5), ("iq4_xs", 23, 32, 6)):
    fn = [f for f in mm if f.startswith("_Z4mv_qILi%dELi1EE" % wt)]
    body = loop(mm[fn[0]]) if fn else []
    if not body:
        check(False, "%s: no matrix-vector kernel with a loop (mv_q<%d, 1>) in mm.cu.o" % (name, wt))
        continue
    per_w = len(body) / (R * per)
    c = Counter(op(t) for t in body)
    top = ", ".join("%s %d" % kv for kv in c.most_common(6))
    check(per_w <= budget, "%s matrix-vector: %d instructions in the loop for %d weights = %.2f per weight "
          "(budget %d; %s)" % (name, len(body), R * per, per_w, budget, top))

at = functions(tmp + "/attn.sass")
fn = [f for f in at if "attn_dec_k" in f]
check(len(fn) > 0, "decode attention kernel (attn_dec_k) in attn.cu.o: %d instantiations" % len(fn))
for f in fn:
    body = loop(at[f])
    wide = sum(1 for t in body if op(t).startswith("LDG") and ".128" in op(t))
    narrow = [op(t) for t in body if op(t).startswith("LDG") and ".128" not in op(t)]
    c = Counter(narrow)
    check(wide >= 4, "%s: %d 128-bit loads in its loop over the context (at least 4: K and V rows of two keys "
          "in flight), %d narrower (%s: the block table's, realigned 8-bit rows)" % (f[:40], wide, len(narrow),
          ", ".join("%s %d" % kv for kv in c.most_common()) or "none"))
print("%s: %d passed, %d failed" % (me, passed, failed))
sys.exit(failed != 0)
EOF
