/* report.c — formatting and writing diagnostics without stdio or allocation. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <errno.h>
#include "report.h"

void (*sk_report_hook)(int fd, const void *buf);

struct out { char *buf; size_t cap, len; };

static void put(struct out *o, char c)
{
    if (o->len + 1 < o->cap)
        o->buf[o->len] = c;
    o->len++;
}

static void put_padded(struct out *o, const char *s, size_t n, int width, bool left, char pad)
{
    int fill = width > (int)n ? width - (int)n : 0;
    if (!left)
        while (fill-- > 0) put(o, pad);
    for (size_t i = 0; i < n; i++) put(o, s[i]);
    if (left)
        while (fill-- > 0) put(o, ' ');
}

static void put_number(struct out *o, unsigned long long v, bool neg, unsigned base,
                       const char *prefix, int width, bool left, char pad)
{
    char tmp[24];
    int n = 0;
    do {
        tmp[n++] = "0123456789abcdef"[v % base];
        v /= base;
    } while (v);
    char digits[32];
    size_t len = 0;
    if (neg) digits[len++] = '-';
    for (const char *p = prefix; *p; p++) digits[len++] = *p;
    while (n) digits[len++] = tmp[--n];
    put_padded(o, digits, len, width, left, pad);
}

size_t sk_vformat(char *buf, size_t cap, const char *fmt, va_list ap)
{
    struct out o = { buf, cap, 0 };
    for (const char *f = fmt; *f; f++) {
        if (*f != '%') { put(&o, *f); continue; }
        f++;
        bool left = false;
        char pad = ' ';
        if (*f == '-') { left = true; f++; }
        if (*f == '0') { pad = '0'; f++; }
        int width = 0;
        while (*f >= '0' && *f <= '9') width = width * 10 + (*f++ - '0');
        int longs = 0;
        bool sized = false;
        while (*f == 'l') { longs++; f++; }
        if (*f == 'z') { sized = true; f++; }
        switch (*f) {
        case 's': {
            const char *s = va_arg(ap, const char *);
            if (!s) s = "(null)";
            put_padded(&o, s, strlen(s), width, left, ' ');
            break;
        }
        case 'c': { char c = (char)va_arg(ap, int); put_padded(&o, &c, 1, width, left, ' '); break; }
        case 'd': case 'i': {
            long long v = sized ? (long long)va_arg(ap, ssize_t)
                        : longs ? va_arg(ap, long long) : va_arg(ap, int);
            put_number(&o, v < 0 ? -(unsigned long long)v : (unsigned long long)v, v < 0, 10, "",
                       width, left, pad);
            break;
        }
        case 'u': case 'x': {
            unsigned long long v = sized ? va_arg(ap, size_t)
                                 : longs ? va_arg(ap, unsigned long long) : va_arg(ap, unsigned);
            put_number(&o, v, false, *f == 'u' ? 10 : 16, "", width, left, pad);
            break;
        }
        case 'p':
            put_number(&o, (uintptr_t)va_arg(ap, void *), false, 16, "0x", width, left, pad);
            break;
        case '%': put(&o, '%'); break;
        case '\0': f--; break;
        default: put(&o, '%'); put(&o, *f); break;
        }
    }
    if (cap)
        buf[o.len < cap ? o.len : cap - 1] = '\0';
    return o.len < cap ? o.len : (cap ? cap - 1 : 0);
}

size_t sk_format(char *buf, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t n = sk_vformat(buf, cap, fmt, ap);
    va_end(ap);
    return n;
}

static void write_all(int fd, const char *s, size_t n)
{
    int saved = errno;   /* diagnostics must not disturb the caller's errno */
    while (n) {
        ssize_t w = write(fd, s, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        s += w;
        n -= (size_t)w;
    }
    errno = saved;
}

static void vwrite_line(int fd, const char *prefix, const char *fmt, va_list ap)
{
    char buf[1024];
    size_t n = sk_format(buf, sizeof buf, "%s", prefix);
    n += sk_vformat(buf + n, sizeof buf - n, fmt, ap);
    if (n && buf[n - 1] != '\n' && n + 1 < sizeof buf)
        buf[n++] = '\n';
    write_all(fd, buf, n);
}

void sk_dprintf(int fd, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    size_t n = sk_vformat(buf, sizeof buf, fmt, ap);
    va_end(ap);
    write_all(fd, buf, n);
}

void sk_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vwrite_line(2, "slabkit: warning: ", fmt, ap);
    va_end(ap);
}

void sk_fatal(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vwrite_line(2, "slabkit: error: ", fmt, ap);
    va_end(ap);
    abort();
}

void sk_report_buffer(const char *problem, const void *buf, const char *cache_name,
                      const char *detail_fmt, ...)
{
    sk_dprintf(2, "slabkit: error: %s: buffer %p (cache %s)\n", problem, buf,
               cache_name ? cache_name : "none");
    if (detail_fmt) {
        va_list ap;
        va_start(ap, detail_fmt);
        vwrite_line(2, "slabkit:   ", detail_fmt, ap);
        va_end(ap);
    }
    if (sk_report_hook)
        sk_report_hook(2, buf);
    abort();
}
