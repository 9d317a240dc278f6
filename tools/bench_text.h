/* Text shared by allreduce_bench and mpi_allreduce, so that their tables
 * and JSON files read alike: the time column and JSON string members.
 * Header only: mpi_allreduce is built by tools/compare_mpi with an MPI
 * compiler, apart from the library. */
#ifndef SHOAL_BENCH_TEXT_H
#define SHOAL_BENCH_TEXT_H

#include <stdio.h>

/* A time in us for the table's 7-wide column, fewer decimals as it grows. */
static inline void bench_fmt_time(double us, char out[32])
{
    if (us >= 10000.0)
        snprintf(out, 32, "%7.0f", us);
    else if (us >= 100.0)
        snprintf(out, 32, "%7.1f", us);
    else
        snprintf(out, 32, "%7.2f", us);
}

/* A JSON string member of free text (a host name, a version, a setting),
 * followed by a comma: quotes, backslashes and control bytes escaped. */
static inline void bench_json_str(FILE *f, const char *key, const char *text)
{
    fprintf(f, "  \"%s\": \"", key);
    for (const unsigned char *c = (const unsigned char *)text; *c; c++) {
        if (*c == '"' || *c == '\\')
            fprintf(f, "\\%c", *c);
        else if (*c < 0x20)
            fprintf(f, "\\u%04x", *c);
        else
            fputc(*c, f);
    }
    fprintf(f, "\",\n");
}

#endif
