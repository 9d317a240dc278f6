/* Log sink: one line per message, prefixed with host, pid and level, written
 * with a single write so lines from ranks sharing a file do not interleave. */
#include "log.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int shoal_log_level = SHOAL_LOG_WARN;
unsigned shoal_log_subsys = SHOAL_SUBSYS_ALL;

static int log_fd = STDERR_FILENO;
static char log_host[64];
static _Thread_local char log_last_error[512];
static pthread_once_t log_host_once = PTHREAD_ONCE_INIT;

static void log_host_init(void)
{
    if (gethostname(log_host, sizeof(log_host) - 1) != 0)
        strcpy(log_host, "?");
}

/* Expand %h (host) and %p (pid) in a file name pattern. */
static void expand_pattern(const char *pattern, char *out, size_t cap)
{
    size_t n = 0;
    for (const char *p = pattern; *p && n + 1 < cap; p++) {
        if (p[0] == '%' && (p[1] == 'h' || p[1] == 'p')) {
            int w = p[1] == 'h' ? snprintf(out + n, cap - n, "%s", log_host)
                                : snprintf(out + n, cap - n, "%d", (int)getpid());
            n = w > 0 && (size_t)w < cap - n ? n + (size_t)w : cap - 1;
            p++;
        } else {
            out[n++] = *p;
        }
    }
    out[n] = '\0';
}

void shoal_log_setup(int level, unsigned subsys, const char *file_pattern)
{
    pthread_once(&log_host_once, log_host_init);
    shoal_log_level = level;
    shoal_log_subsys = subsys;
    if (file_pattern && file_pattern[0]) {
        char path[512];
        expand_pattern(file_pattern, path, sizeof(path));
        int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd >= 0) {
            if (log_fd != STDERR_FILENO)
                close(log_fd);
            log_fd = fd;
        } else {
            shoal_warn(INIT, "cannot open SHOAL_DEBUG_FILE %s: %s; logging to stderr",
                       path, strerror(errno));
        }
    }
}

const char *shoal_log_last_error(void)
{
    return log_last_error;
}

void shoal_log_clear_error(void)
{
    log_last_error[0] = '\0';
}

void shoal_log_write(shoal_log_level_t level, unsigned subsys, const char *file,
                     int line, const char *fmt, ...)
{
    static const char *const level_names[] = {"NONE", "ERROR", "WARN", "INFO",
                                              "DEBUG", "TRACE"};
    pthread_once(&log_host_once, log_host_init);
    char buf[1024];
    int n = snprintf(buf, sizeof(buf), "%s:%d shoal %s ", log_host, (int)getpid(),
                     level_names[level]);
    if (level >= SHOAL_LOG_DEBUG && n > 0 && (size_t)n < sizeof(buf)) {
        const char *base = strrchr(file, '/');
        n += snprintf(buf + n, sizeof(buf) - (size_t)n, "%s:%d ", base ? base + 1 : file, line);
    }
    int msg_at = n > 0 && (size_t)n < sizeof(buf) ? n : 0;
    if (msg_at) {
        va_list ap;
        va_start(ap, fmt);
        n += vsnprintf(buf + n, sizeof(buf) - (size_t)n, fmt, ap);
        va_end(ap);
    }
    if (n < 0)
        return;
    if (level == SHOAL_LOG_ERROR)
        snprintf(log_last_error, sizeof(log_last_error), "%s", buf + msg_at);
    if ((int)level > shoal_log_level || !(subsys & shoal_log_subsys))
        return;
    if ((size_t)n >= sizeof(buf) - 1)
        n = (int)sizeof(buf) - 2;
    buf[n++] = '\n';
    ssize_t w = write(log_fd, buf, (size_t)n);
    (void)w;
}
