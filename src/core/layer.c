/* layer.c — the registry of the upper layers' hooks; see layer.h. */
#include "layer.h"

static const struct layer_hooks *layers[LAYER_COUNT];

void layer_register(enum layer level, const struct layer_hooks *hooks)
{
    __atomic_store_n(&layers[level], hooks, __ATOMIC_RELEASE);
}

const struct layer_hooks *layer_at(enum layer level)
{
    return __atomic_load_n(&layers[level], __ATOMIC_ACQUIRE);
}
