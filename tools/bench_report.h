/* What rank 0 of allreduce_bench writes around the rows: the table's
 * header (the settings, the ranks and their memory, the memcpy baseline,
 * the column heads) and, with -J, the JSON file's settings, opened before
 * the rows and closed after them with the run's outcome. tools/compare_mpi
 * and tools/plot_bench read that file. allreduce_bench.c writes the rows
 * to both. */
#ifndef SHOAL_BENCH_REPORT_H
#define SHOAL_BENCH_REPORT_H

#include "bench_args.h"

#include <stdio.h>

/* Exit codes: every result right, some wrong, or the run failed; the JSON
 * file's status says which. */
enum { SHOAL_BENCH_EXIT_OK = 0, SHOAL_BENCH_EXIT_WRONG = 1, SHOAL_BENCH_EXIT_ERROR = 2 };

/* Every rank's pid, host and device (-1 for host memory) gathered, and on
 * rank 0 the header printed. Collective over comm. */
shoal_status_t shoal_bench_header(shoal_comm_t comm, int rank, int nranks,
                                  const shoal_bench_opts_t *o, int device);

/* -J on rank 0: the file, its settings written and its results left open;
 * NULL, said why, when it cannot be made. */
FILE *shoal_bench_json_open(const shoal_bench_opts_t *o, int nranks);

/* The results and the document closed with the outcome code; returns code,
 * or SHOAL_BENCH_EXIT_ERROR if writing failed. */
int shoal_bench_json_close(FILE *f, const char *path, int code);

#endif
