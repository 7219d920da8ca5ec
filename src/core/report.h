/* report.h — the one way the library speaks: formatted into a stack buffer and
 * written with write(2), because it may run inside malloc, before libc is
 * ready, or with a corrupt heap (no stdio, no allocation).
 *
 * Formats: %s %c %d %i %u %x %p %% with optional l/ll/z length modifiers,
 * and a minimum width (%8zu, %-20s, %016lx). */
#ifndef SK_REPORT_H
#define SK_REPORT_H

#include <stdarg.h>
#include <stddef.h>
#include "common.h"

/* Formats into buf (always NUL-terminated); returns the length written. */
size_t sk_vformat(char *buf, size_t cap, const char *fmt, va_list ap);
size_t sk_format(char *buf, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Writes a formatted line to fd (no newline added). */
void sk_dprintf(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* "slabkit: warning: ..." on stderr; the process goes on. */
void sk_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* "slabkit: error: ..." on stderr, then the report hooks (audit trail of the
 * buffer when debugging is on), then abort(): a process whose heap is corrupt
 * must not go on writing data. */
SK_NORETURN SK_COLD void sk_fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A heap-corruption report about one buffer: names the problem, the buffer,
 * its cache (may be NULL), then calls the debug layer's hook to print the
 * buffer's transactions, then aborts.  detail is one more formatted line. */
SK_NORETURN SK_COLD void sk_report_buffer(const char *problem, const void *buf,
                                          const char *cache_name, const char *detail_fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Set by the debug layer: prints what it knows of buf (audit records). */
extern void (*sk_report_hook)(int fd, const void *buf);

#endif
