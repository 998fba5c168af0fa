/* LD_PRELOAD shim for scripts/enospc.sh: the Nth write, pwrite, writev, fsync, fdatasync,
 * rename, renameat, renameat2, mkdir or link of the process fails with ENOSPC or EIO.
 *   SHIM_FAIL_AT=N     the Nth counted call fails (0: count only; unset: the shim is inert)
 *   SHIM_ERRNO=EIO     EIO instead of ENOSPC
 *   SHIM_STICKY=1      every counted call after the Nth fails too (a disk that stays full)
 *   SHIM_COUNT_FILE=f  append the number of counted calls to f at exit
 *   SHIM_TRACE=1       print each counted call on stderr
 * Writes count only on regular files: sockets, pipes and the terminal are not the disk. Calls
 * made through raw system calls (rustix, used by the spool writer) are not seen. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>
#include <fcntl.h>

static long fail_at = -1;   /* the Nth counted call fails; 0: only count */
static int sticky = 0;      /* every counted call after the Nth fails too (a full disk) */
static int fail_errno = ENOSPC;
static long calls = 0;
static const char *count_file = 0;

__attribute__((constructor)) static void init(void) {
  const char *v = getenv("SHIM_FAIL_AT");
  if (v) fail_at = atol(v);
  v = getenv("SHIM_ERRNO");
  if (v && strcmp(v, "EIO") == 0) fail_errno = EIO;
  v = getenv("SHIM_STICKY");
  sticky = v && strcmp(v, "1") == 0;
  count_file = getenv("SHIM_COUNT_FILE");
}

__attribute__((destructor)) static void fini(void) {
  if (!count_file) return;
  FILE *f = fopen(count_file, "a");
  if (f) { fprintf(f, "%ld\n", __atomic_load_n(&calls, __ATOMIC_SEQ_CST)); fclose(f); }
}

/* Counts one call; nonzero when it must fail. */
static int hit_(const char *name, int fd, const char *path) {
  if (fail_at < 0) return 0;
  long n = __atomic_add_fetch(&calls, 1, __ATOMIC_SEQ_CST);
  int fail = fail_at > 0 && (n == fail_at || (sticky && n > fail_at));
  if (getenv("SHIM_TRACE")) {
    char link[64], target[512] = "";
    if (!path && fd >= 0) {
      snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
      ssize_t k = readlink(link, target, sizeof target - 1);
      if (k > 0) target[k] = 0;
      path = target;
    }
    dprintf(2, "shim: #%ld %s %s%s\n", n, name, path ? path : "", fail ? " FAILED" : "");
  }
  return fail;
}
#define hit() hit_(__func__, -1, 0)
#define hit_fd(fd) hit_(__func__, fd, 0)
#define hit_path(p) hit_(__func__, -1, p)

/* Writes are counted only on regular files: sockets, pipes and the terminal are not the disk. */
static int on_disk(int fd) {
  struct stat st;
  return fd > 2 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
}

#define REAL(ret, name, ...) static ret (*real_##name)(__VA_ARGS__); \
  if (!real_##name) real_##name = dlsym(RTLD_NEXT, #name)

ssize_t write(int fd, const void *b, size_t n) {
  REAL(ssize_t, write, int, const void *, size_t);
  if (on_disk(fd) && hit_fd(fd)) { errno = fail_errno; return -1; }
  return real_write(fd, b, n);
}
ssize_t pwrite(int fd, const void *b, size_t n, off_t o) {
  REAL(ssize_t, pwrite, int, const void *, size_t, off_t);
  if (on_disk(fd) && hit_fd(fd)) { errno = fail_errno; return -1; }
  return real_pwrite(fd, b, n, o);
}
ssize_t pwrite64(int fd, const void *b, size_t n, off_t o) {
  REAL(ssize_t, pwrite64, int, const void *, size_t, off_t);
  if (on_disk(fd) && hit_fd(fd)) { errno = fail_errno; return -1; }
  return real_pwrite64(fd, b, n, o);
}
ssize_t writev(int fd, const struct iovec *v, int c) {
  REAL(ssize_t, writev, int, const struct iovec *, int);
  if (on_disk(fd) && hit_fd(fd)) { errno = fail_errno; return -1; }
  return real_writev(fd, v, c);
}
int fsync(int fd) {
  REAL(int, fsync, int);
  if (hit_fd(fd)) { errno = fail_errno; return -1; }
  return real_fsync(fd);
}
int fdatasync(int fd) {
  REAL(int, fdatasync, int);
  if (hit_fd(fd)) { errno = fail_errno; return -1; }
  return real_fdatasync(fd);
}
int rename(const char *a, const char *b) {
  REAL(int, rename, const char *, const char *);
  if (hit_path(b)) { errno = fail_errno; return -1; }
  return real_rename(a, b);
}
int renameat(int da, const char *a, int db, const char *b) {
  REAL(int, renameat, int, const char *, int, const char *);
  if (hit_path(b)) { errno = fail_errno; return -1; }
  return real_renameat(da, a, db, b);
}
int renameat2(int da, const char *a, int db, const char *b, unsigned f) {
  REAL(int, renameat2, int, const char *, int, const char *, unsigned);
  if (hit_path(b)) { errno = fail_errno; return -1; }
  return real_renameat2(da, a, db, b, f);
}
int mkdir(const char *p, mode_t m) {
  REAL(int, mkdir, const char *, mode_t);
  if (hit_path(p)) { errno = fail_errno; return -1; }
  return real_mkdir(p, m);
}
int link(const char *a, const char *b) {
  REAL(int, link, const char *, const char *);
  if (hit_path(b)) { errno = fail_errno; return -1; }
  return real_link(a, b);
}
