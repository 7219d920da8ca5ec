/* util.c — allocation-free helpers for the shim: a string builder over a fixed
 * buffer (the JSON log is built with it instead of stdio, which may allocate),
 * number parsing, a careful file reader (O_NOFOLLOW, owner and mode checks)
 * and an atomic writer (temporary file, rename),
 * the FNV-1a hash that names decision files (tools/slabkit/imas/paths.py
 * computes the same), clocks and the one warning function.  No locks: callers
 * own buffers. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>            /* rename() only: no stdio streams here */
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>
#include "imas.h"

void imas_say(const char *kind, const char *msg, const char *detail)
{
    char buf[512];
    struct sbuf b = { buf, 0, sizeof buf - 1, false };
    sb_str(&b, "imas: ");
    sb_str(&b, kind);
    sb_str(&b, msg);
    if (detail) {
        sb_str(&b, ": ");
        sb_str(&b, detail);
    }
    sb_chr(&b, '\n');
    ssize_t r = write(2, buf, b.len);
    (void)r;
}

void imas_warn(const char *msg, const char *detail)
{
    imas_say("warning: ", msg, detail);
}

/* Reads a whole small file into buf (NUL-terminated).  With must_be_private the
 * file must be a regular file owned by us and not writable by others, and a
 * symlink is refused: the content decides which library we load. */
size_t imas_read_file(const char *path, char *buf, size_t cap, bool must_be_private)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | (must_be_private ? O_NOFOLLOW : 0));
    if (fd < 0)
        return 0;
    if (must_be_private) {
        struct stat st;
        if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != getuid() ||
            (st.st_mode & 022) || st.st_size >= (off_t)cap) {
            close(fd);
            return 0;
        }
    }
    size_t len = 0;
    while (len + 1 < cap) {
        ssize_t r = read(fd, buf + len, cap - 1 - len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        len += (size_t)r;
    }
    close(fd);
    buf[len] = 0;
    return len;
}

/* Writes a whole file as readers must see it: into <path>.<pid>.tmp (0600,
 * O_NOFOLLOW), then renamed over path. */
bool imas_write_atomic(const char *path, const char *data, size_t len)
{
    char tmp[4400];
    struct sbuf t = { tmp, 0, sizeof tmp - 1, false };
    sb_str(&t, path);
    sb_chr(&t, '.');
    sb_i64(&t, getpid());
    sb_str(&t, ".tmp");
    tmp[t.len] = 0;
    if (t.overflow)
        return false;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return false;
    size_t off = 0;
    while (off < len) {
        ssize_t r = write(fd, data + off, len - off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        off += (size_t)r;
    }
    close(fd);
    if (off != len || rename(tmp, path) != 0) {
        unlink(tmp);
        return false;
    }
    return true;
}

uint64_t imas_fnv1a(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;         /* FNV-1a 64-bit offset basis */
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ull;                  /* FNV 64-bit prime */
    }
    return h;
}

uint64_t imas_parse_u64(const char *s, const char **end)
{
    uint64_t v = 0;
    while (*s == ' ' || *s == '\t')
        s++;
    while (*s >= '0' && *s <= '9') {
        if (v > (UINT64_MAX - 9) / 10)
            v = UINT64_MAX / 10;                /* saturate rather than wrap */
        v = v * 10 + (uint64_t)(*s++ - '0');
    }
    if (end)
        *end = s;
    return v;
}

/* Plain decimal numbers only ("0.93", "12"): strtod may allocate for long inputs. */
double imas_parse_double(const char *s, const char **end)
{
    while (*s == ' ' || *s == '\t')
        s++;
    bool neg = *s == '-';
    if (neg || *s == '+')
        s++;
    double v = (double)imas_parse_u64(s, &s);
    if (*s == '.') {
        double scale = 0.1;
        for (s++; *s >= '0' && *s <= '9'; s++, scale *= 0.1)
            v += (*s - '0') * scale;
    }
    if (end)
        *end = s;
    return neg ? -v : v;
}

double imas_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

uint64_t imas_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void sb_chr(struct sbuf *b, char c)
{
    if (b->len < b->cap)
        b->p[b->len++] = c;
    else
        b->overflow = true;
}

void sb_str(struct sbuf *b, const char *s)
{
    while (*s)
        sb_chr(b, *s++);
}

void sb_json_str(struct sbuf *b, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    sb_chr(b, '"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            sb_chr(b, '\\');
            sb_chr(b, (char)c);
        } else if (c < 0x20 || c >= 0x7f) {
            /* Bytes outside printable ASCII are escaped one by one, so the log
             * stays valid JSON whatever the path holds. */
            sb_str(b, "\\u00");
            sb_chr(b, hex[c >> 4]);
            sb_chr(b, hex[c & 15]);
        } else {
            sb_chr(b, (char)c);
        }
    }
    sb_chr(b, '"');
}

void sb_u64(struct sbuf *b, uint64_t v)
{
    char tmp[24];
    int i = 0;
    do {
        tmp[i++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (i)
        sb_chr(b, tmp[--i]);
}

void sb_i64(struct sbuf *b, int64_t v)
{
    if (v < 0) {
        sb_chr(b, '-');
        sb_u64(b, (uint64_t)(-(v + 1)) + 1);
    } else {
        sb_u64(b, (uint64_t)v);
    }
}

void sb_fixed(struct sbuf *b, double v, int decimals)
{
    if (v != v) {                               /* NaN is not JSON */
        sb_str(b, "null");
        return;
    }
    if (v < 0) {
        sb_chr(b, '-');
        v = -v;
    }
    uint64_t scale = 1;
    for (int i = 0; i < decimals; i++)
        scale *= 10;
    if (v > 1.8e19 / (double)scale)
        v = 1.8e19 / (double)scale;
    uint64_t x = (uint64_t)(v * (double)scale + 0.5);
    sb_u64(b, x / scale);
    if (decimals) {
        sb_chr(b, '.');
        uint64_t frac = x % scale;
        for (uint64_t d = scale / 10; d; d /= 10)
            sb_chr(b, (char)('0' + (frac / d) % 10));
    }
}
