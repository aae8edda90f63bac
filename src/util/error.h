/*
 * error.h: per-thread error messages behind seer_last_error(), and small allocation
 * helpers that turn failures into statuses. Not for logging.
 */
#ifndef SEER_UTIL_ERROR_H
#define SEER_UTIL_ERROR_H

#include "seer.h"

#include <stddef.h>

/* Records a formatted message for seer_last_error() and returns s. */
seer_status seer_err(seer_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void seer_clear_error(void);

/* The message behind seer_last_error(), kept across a cleanup: the public free functions
 * restore it, so that the failure a caller reads is the one that happened, not a later
 * one of the cleanup it caused (a rank's link timing out while freeing, say). */
typedef struct {
    char msg[1024];
} seer_err_saved;
void seer_err_save(seer_err_saved *s);
void seer_err_restore(const seer_err_saved *s);
/* Runs stmt (a cleanup) with the last error kept across it. */
#define SEER_ERR_KEPT(stmt)               \
    do {                                  \
        seer_err_saved seer_kept_;        \
        seer_err_save(&seer_kept_);       \
        stmt;                             \
        seer_err_restore(&seer_kept_);    \
    } while (0)

/* malloc/calloc that fail on overflow of n*size; NULL on failure (caller reports OOM). */
void *seer_malloc_array(size_t n, size_t size);
void *seer_calloc_array(size_t n, size_t size);

/* Public functions reject a NULL pointer argument with SEER_ERR_INVALID_ARG naming it. */
#define SEER_CHECK_ARG(p)                                                                  \
    do {                                                                                   \
        if (!(p))                                                                          \
            return seer_err(SEER_ERR_INVALID_ARG, "%s: %s is NULL", __func__, #p);         \
    } while (0)

/* Propagate a non-OK status. */
#define SEER_TRY(expr)                        \
    do {                                      \
        seer_status seer_try_s_ = (expr);     \
        if (seer_try_s_ != SEER_OK)           \
            return seer_try_s_;               \
    } while (0)

#endif
