/* debug.h — the debugging layer (SLABKIT_DEBUG): auditing, poisoning,
 * redzones, leak report, guard pages (Bonwick section 6, libumem).  It wraps
 * the active design's operations table when debugging is on, so the normal
 * fast paths carry no debug branches at all. */
#ifndef SK_DEBUG_H
#define SK_DEBUG_H

#include "../core/common.h"

struct kmem_cache;
struct slabkit_cache_stats;

extern bool debug_on;

void debug_install(void);               /* called by cache_init before any cache exists */
size_t debug_ksize(const void *p);      /* usable size = the size asked for */
bool debug_guarded_free(void *p);       /* true if p was a guarded large block (now freed) */
void debug_note_free(const void *p);     /* a large or OS-direct block is being freed */
void debug_cache_destroy(struct kmem_cache *cp);  /* before its threads' state is flushed */
void debug_reap(void);                  /* empties the quarantine */
void debug_adjust_stats(struct kmem_cache *cp, struct slabkit_cache_stats *st);  /* quarantined: freed */
void debug_fork_prepare(void);
void debug_fork_parent(void);
void debug_fork_child(void);

#endif
