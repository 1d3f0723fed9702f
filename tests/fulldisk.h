/* tests/fulldisk.h: a full disk for the writers' tests. Header-only, tests
 * only.
 *
 * full_disk_mount() mounts a tmpfs of a few KiB at dir (made if missing)
 * when this process may mount (root, as in CI); every write past its size
 * fails with ENOSPC, as on a full disk. Returns false when mounting is not
 * allowed here (the caller then skips, saying so). full_disk_umount() takes
 * it away again (also a stale one from an earlier run). */
#ifndef PAGECHAT_FULLDISK_H
#define PAGECHAT_FULLDISK_H

#include <stdbool.h>
#include <stdio.h>
#include <sys/mount.h>
#include <sys/stat.h>

#define FULL_DISK_BYTES 16384

static inline void full_disk_umount(const char *dir)
{
	umount2(dir, MNT_DETACH);
}

static inline bool full_disk_mount(const char *dir)
{
	full_disk_umount(dir);
	mkdir(dir, 0700);
	char opts[64];
	snprintf(opts, sizeof opts, "size=%d,mode=0700", FULL_DISK_BYTES);
	if (mount("tmpfs", dir, "tmpfs", 0, opts) == 0)
		return true;
	fprintf(stderr, "note: cannot mount a tmpfs at %s (not root?): full-disk checks skipped\n", dir);
	return false;
}

#endif
