/* self.h — where slabkit's own code lies, so the stacks the debug layer and
 * the heap profiler capture can leave out slabkit's frames. */
#ifndef SK_SELF_H
#define SK_SELF_H

#include "common.h"

/* True when pc lies in libslabkit.so's loaded segments.  Always false when
 * slabkit is linked into the program (its code is the program's then):
 * callers skip a known count of their own frames instead. */
bool self_code(const void *pc);

#endif
