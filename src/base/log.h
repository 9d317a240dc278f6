/* Logging: levels and subsystems set by SHOAL_DEBUG, SHOAL_DEBUG_SUBSYS and
 * SHOAL_DEBUG_FILE. Macros test the level before formatting anything and
 * leave errno as they found it. Thread-safe. */
#ifndef SHOAL_LOG_H
#define SHOAL_LOG_H

#include <errno.h>

typedef enum {
    SHOAL_LOG_NONE = 0,
    SHOAL_LOG_ERROR,
    SHOAL_LOG_WARN,
    SHOAL_LOG_INFO,
    SHOAL_LOG_DEBUG,
    SHOAL_LOG_TRACE,
} shoal_log_level_t;

/* X(name): subsystems, one bit each in list order. */
#define SHOAL_SUBSYS_LIST(X)                                                  \
    X(INIT) X(TOPO) X(BOOT) X(SHM) X(TCP) X(IBV) X(CUDA) X(ALGO) X(COMP) X(MEM)

enum {
#define SHOAL_SUBSYS_BIT_(name) SHOAL_SUBSYS_BIT_##name,
    SHOAL_SUBSYS_LIST(SHOAL_SUBSYS_BIT_)
#undef SHOAL_SUBSYS_BIT_
    SHOAL_SUBSYS_COUNT
};
#define SHOAL_SUBSYS(name) (1u << SHOAL_SUBSYS_BIT_##name)
#define SHOAL_SUBSYS_ALL ((1u << SHOAL_SUBSYS_COUNT) - 1)

extern int shoal_log_level;         /* current level, set once by config */
extern unsigned shoal_log_subsys;   /* enabled subsystem mask */

void shoal_log_write(shoal_log_level_t level, unsigned subsys, const char *file,
                     int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* The text of the last error the calling thread logged (also when the
 * level hides errors), or "" when none since shoal_log_clear_error. */
const char *shoal_log_last_error(void);
void shoal_log_clear_error(void);

/* Apply the log settings of the config; called once by shoal_config_get. */
void shoal_log_setup(int level, unsigned subsys, const char *file_pattern);

#define SHOAL_LOG(level, subsys, ...)                                         \
    do {                                                                      \
        if ((int)(level) <= shoal_log_level &&                                \
            ((subsys) & shoal_log_subsys)) {                                  \
            int shoal_log_errno_ = errno;                                     \
            shoal_log_write((level), (subsys), __FILE__, __LINE__,            \
                            __VA_ARGS__);                                     \
            errno = shoal_log_errno_;                                         \
        }                                                                     \
    } while (0)

/* Errors are always formatted, logged or not, so that the calling thread's
 * last one can be given back in a status message (shoal_log_last_error). */
#define SHOAL_LOG_ALWAYS(level, subsys, ...)                                  \
    do {                                                                      \
        int shoal_log_errno_ = errno;                                         \
        shoal_log_write((level), (subsys), __FILE__, __LINE__, __VA_ARGS__);  \
        errno = shoal_log_errno_;                                             \
    } while (0)

#define shoal_error(ss, ...) SHOAL_LOG_ALWAYS(SHOAL_LOG_ERROR, SHOAL_SUBSYS(ss), __VA_ARGS__)
#define shoal_warn(ss, ...)  SHOAL_LOG(SHOAL_LOG_WARN, SHOAL_SUBSYS(ss), __VA_ARGS__)
#define shoal_info(ss, ...)  SHOAL_LOG(SHOAL_LOG_INFO, SHOAL_SUBSYS(ss), __VA_ARGS__)
#define shoal_debug(ss, ...) SHOAL_LOG(SHOAL_LOG_DEBUG, SHOAL_SUBSYS(ss), __VA_ARGS__)
#define shoal_trace(ss, ...) SHOAL_LOG(SHOAL_LOG_TRACE, SHOAL_SUBSYS(ss), __VA_ARGS__)

#endif
