/* The settings' machinery: typed parsers, loading every component's table
 * (found in the shoal_config_tables linker section) into shoal_config_t,
 * printing them, and the NCCL aliases (translators in the
 * shoal_config_aliases section, defined by the NCCL door). This file alone
 * calls getenv: everything else asks shoal_config_get() or
 * shoal_config_env(). */
#include "config.h"
#include "log.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <strings.h>

int shoal_config_parse_size(const char *text, size_t *out_p)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (end == text || errno || !isdigit((unsigned char)text[0]))
        return -1;
    unsigned shift = 0;
    switch (tolower((unsigned char)*end)) {
    case '\0': break;
    case 'k': shift = 10; end++; break;
    case 'm': shift = 20; end++; break;
    case 'g': shift = 30; end++; break;
    default: return -1;
    }
    if (*end == 'b' || *end == 'B')
        end++;
    if (*end != '\0' || (shift && v > (ULLONG_MAX >> shift)))
        return -1;
    *out_p = (size_t)(v << shift);
    return 0;
}

int shoal_config_parse_time_ns(const char *text, uint64_t *out_p)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || errno || !(v >= 0))
        return -1;
    double scale;
    if (*end == '\0' || !strcmp(end, "s"))
        scale = 1e9;
    else if (!strcmp(end, "ms"))
        scale = 1e6;
    else if (!strcmp(end, "us"))
        scale = 1e3;
    else if (!strcmp(end, "ns"))
        scale = 1;
    else if (!strcmp(end, "m") || !strcmp(end, "min"))
        scale = 60e9;
    else
        return -1;
    if (v * scale > 1e18)
        return -1;
    *out_p = (uint64_t)(v * scale);
    return 0;
}

int shoal_config_parse_bool(const char *text, int *out_p)
{
    static const char *const yes[] = {"y", "yes", "1", "true", "on"};
    static const char *const no[] = {"n", "no", "0", "false", "off"};
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        if (!strcasecmp(text, yes[i])) {
            *out_p = 1;
            return 0;
        }
        if (!strcasecmp(text, no[i])) {
            *out_p = 0;
            return 0;
        }
    }
    return -1;
}

int shoal_config_field_size(const char *text, void *field)
{
    return shoal_config_parse_size(text, field);
}

int shoal_config_field_time(const char *text, void *field)
{
    return shoal_config_parse_time_ns(text, field);
}

int shoal_config_field_bool(const char *text, void *field)
{
    return shoal_config_parse_bool(text, field);
}

int shoal_config_field_auto(const char *text, void *field)
{
    int on;
    if (!strcasecmp(text, "auto"))
        *(int *)field = SHOAL_AUTO;
    else if (shoal_config_parse_bool(text, &on) == 0)
        *(int *)field = on ? SHOAL_ON : SHOAL_OFF;
    else
        return -1;
    return 0;
}

int shoal_config_field_int(const char *text, void *field)
{
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (end == text || *end || errno || v < INT_MIN || v > INT_MAX)
        return -1;
    *(int *)field = (int)v;
    return 0;
}

int shoal_config_field_string(const char *text, void *field)
{
    if (strlen(text) >= SHOAL_CONFIG_STR_MAX)
        return -1;
    strcpy(field, text);
    return 0;
}

/* A string that shoal_config_print never shows. */
int shoal_config_field_secret(const char *text, void *field)
{
    return shoal_config_field_string(text, field);
}

int shoal_config_field_level(const char *text, void *field)
{
    static const char *const names[] = {"none", "error", "warn", "info",
                                        "debug", "trace"};
    for (int i = 0; i < (int)(sizeof(names) / sizeof(names[0])); i++) {
        if (!strcasecmp(text, names[i]) || (i == SHOAL_LOG_WARN && !strcasecmp(text, "warning"))) {
            *(int *)field = i;
            return 0;
        }
    }
    return -1;
}

static const char *const subsys_names[] = {
#define SHOAL_SUBSYS_NAME_(name) #name,
    SHOAL_SUBSYS_LIST(SHOAL_SUBSYS_NAME_)
#undef SHOAL_SUBSYS_NAME_
};

/* "ALL", or a comma list of subsystem names; "^A,B" means all but A and B. */
int shoal_config_field_subsys(const char *text, void *field)
{
    int invert = text[0] == '^';
    unsigned mask = 0;
    char buf[SHOAL_CONFIG_STR_MAX];
    if (strlen(text) >= sizeof(buf))
        return -1;
    strcpy(buf, text + invert);
    for (char *save, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (!strcasecmp(tok, "ALL")) {
            mask = SHOAL_SUBSYS_ALL;
            continue;
        }
        int i;
        for (i = 0; i < SHOAL_SUBSYS_COUNT; i++)
            if (!strcasecmp(tok, subsys_names[i]))
                break;
        if (i == SHOAL_SUBSYS_COUNT)
            return -1;
        mask |= 1u << i;
    }
    *(unsigned *)field = invert ? SHOAL_SUBSYS_ALL & ~mask : mask;
    return 0;
}

/* "host:port" or "[v6]:port" with a port in 1..65535, or "" (unset). The
 * host is resolved later, by whoever uses the address. */
int shoal_config_field_hostport(const char *text, void *field)
{
    if (text[0]) {
        const char *colon = strrchr(text, ':');
        if (!colon || colon == text || !colon[1] || strlen(colon + 1) > 5)
            return -1;
        if (text[0] == '[' && colon[-1] != ']')
            return -1;
        long port = 0;
        for (const char *p = colon + 1; *p; p++) {
            if (!isdigit((unsigned char)*p))
                return -1;
            port = port * 10 + (*p - '0');
        }
        if (port < 1 || port > 65535)
            return -1;
    }
    return shoal_config_field_string(text, field);
}

static shoal_config_t config;
static pthread_once_t config_once = PTHREAD_ONCE_INIT;
/* Set once by the NCCL door; read by every load after. */
static atomic_int config_nccl_env;
/* Loads so far, so that shoal_config_use_nccl_env loads only once when it
 * comes first. */
atomic_uint shoal_config_loads;

/* The tables every component placed in their section; weak, so that a
 * program with none linked still builds (and gets all-zero settings). */
extern const shoal_config_table_t __start_shoal_config_tables[] __attribute__((weak));
extern const shoal_config_table_t __stop_shoal_config_tables[] __attribute__((weak));
extern const shoal_config_alias_t __start_shoal_config_aliases[] __attribute__((weak));
extern const shoal_config_alias_t __stop_shoal_config_aliases[] __attribute__((weak));

#define CONFIG_MAX_TABLES 32

/* The tables in print order, set by the first load. */
static const shoal_config_table_t *tables[CONFIG_MAX_TABLES];
static size_t ntables;

static int table_cmp(const void *a, const void *b)
{
    const shoal_config_table_t *x = *(const shoal_config_table_t *const *)a;
    const shoal_config_table_t *y = *(const shoal_config_table_t *const *)b;
    return x->order != y->order ? (x->order > y->order) - (x->order < y->order)
                                : strcmp(x->component, y->component);
}

/* The section's order is the link's, which no one chose: sort by order. */
static void config_collect(void)
{
    if (ntables)
        return;
    size_t n = 0;
    for (const shoal_config_table_t *t = __start_shoal_config_tables;
         t && t < __stop_shoal_config_tables && n < CONFIG_MAX_TABLES; t++)
        tables[n++] = t;
    qsort(tables, n, sizeof(tables[0]), table_cmp);
    ntables = n;
}

/* The door's translator of an alias, or NULL when none is linked. */
static shoal_config_translate_fn_t config_translator(const char *nccl_name)
{
    for (const shoal_config_alias_t *a = __start_shoal_config_aliases;
         a && a < __stop_shoal_config_aliases; a++) {
        if (!strcmp(a->nccl_name, nccl_name))
            return a->translate;
    }
    return NULL;
}

/* Where an entry's text came from. */
typedef enum {
    SOURCE_DEFAULT,   /* neither variable set */
    SOURCE_SHOAL,     /* the SHOAL_ variable */
    SOURCE_NCCL,      /* the NCCL alias, translated into buf */
    SOURCE_NCCL_BAD,  /* the NCCL alias, which does not translate */
} config_source_t;

/* The text that sets e: the SHOAL_ variable when set, else (with aliases
 * on) the NCCL variable when set and not empty, translated into buf
 * (SHOAL_CONFIG_STR_MAX bytes), with the translator's note. */
static config_source_t config_text(const shoal_config_entry_t *e, int aliases, char *buf,
                                   char *note, size_t note_cap, const char **text_p)
{
    const char *text = getenv(e->name);
    note[0] = '\0';
    if (text) {
        *text_p = text;
        return SOURCE_SHOAL;
    }
    const char *nccl = aliases && e->nccl_name ? getenv(e->nccl_name) : NULL;
    shoal_config_translate_fn_t translate = nccl ? config_translator(e->nccl_name) : NULL;
    if (!nccl || !nccl[0] || !translate) {
        *text_p = e->def;
        return SOURCE_DEFAULT;
    }
    if (translate(nccl, buf, note, note_cap) != 0) {
        *text_p = e->def;
        return SOURCE_NCCL_BAD;
    }
    *text_p = buf;
    return SOURCE_NCCL;
}

typedef struct {
    const shoal_config_entry_t *entry;
    config_source_t source;
    int parsed;                          /* the text parsed */
    char text[SHOAL_CONFIG_STR_MAX];     /* what a translated alias became */
    char note[512];
} config_report_t;

#define CONFIG_MAX_ENTRIES 128

/* The text each entry took at the last load, in print order: for
 * shoal_config_text. */
static char loaded_text[CONFIG_MAX_ENTRIES][SHOAL_CONFIG_STR_MAX];

/* Logging is configured by the table itself, so the load reports what it
 * did (bad values, aliases taken) only once the log settings apply. */
static void config_report(const config_report_t *r)
{
    const shoal_config_entry_t *e = r->entry;
    switch (r->source) {
    case SOURCE_SHOAL:
        if (!r->parsed)
            shoal_warn(INIT, "cannot parse %s=\"%s\"; using its default", e->name,
                       getenv(e->name));
        if (config_nccl_env && e->nccl_name && getenv(e->nccl_name))
            shoal_info(INIT, "%s is set, so %s=\"%s\" is ignored", e->name, e->nccl_name,
                       getenv(e->nccl_name));
        break;
    case SOURCE_NCCL_BAD:
        shoal_warn(INIT, "cannot read %s=\"%s\" as %s; using its default", e->nccl_name,
                   getenv(e->nccl_name), e->name);
        break;
    case SOURCE_NCCL:
        if (!r->parsed)
            shoal_warn(INIT, "%s=\"%s\" gives %s=\"%s\", which does not parse; using its "
                       "default", e->nccl_name, getenv(e->nccl_name), e->name, r->text);
        else
            shoal_info(INIT, "%s=\"%s\" read as %s=\"%s\"%s%s", e->nccl_name,
                       getenv(e->nccl_name), e->name, r->text, r->note[0] ? ": " : "",
                       r->note);
        break;
    case SOURCE_DEFAULT:
        break;
    }
}

static void config_load(void)
{
    shoal_config_t c;
    memset(&c, 0, sizeof(c));
    static config_report_t reports[CONFIG_MAX_ENTRIES];
    size_t nreports = 0;
    int aliases = atomic_load_explicit(&config_nccl_env, memory_order_acquire);
    config_collect();
    for (size_t t = 0; t < ntables; t++) {
        for (size_t i = 0; i < tables[t]->count; i++) {
            const shoal_config_entry_t *e = &tables[t]->entries[i];
            /* Every entry is read; one past the reports' room goes
             * unreported, and the load says so below. */
            config_report_t spare, *r = nreports < CONFIG_MAX_ENTRIES ? &reports[nreports]
                                                                      : &spare;
            nreports++;
            void *field = (char *)&c + e->offset;
            const char *text;
            r->entry = e;
            r->source = config_text(e, aliases, r->text, r->note, sizeof(r->note), &text);
            r->parsed = e->parse(text, field) == 0;
            if (!r->parsed)
                e->parse(e->def, field);
            if (nreports <= CONFIG_MAX_ENTRIES)
                snprintf(loaded_text[nreports - 1], SHOAL_CONFIG_STR_MAX, "%s",
                         e->parse == shoal_config_field_secret
                             ? (r->source == SOURCE_DEFAULT ? e->def : "(set, not shown)")
                             : r->parsed ? text : e->def);
        }
    }
    shoal_log_setup(c.core.log_level, c.core.log_subsys, c.core.log_file);
    for (size_t i = 0; i < nreports && i < CONFIG_MAX_ENTRIES; i++)
        config_report(&reports[i]);
    if (nreports > CONFIG_MAX_ENTRIES)
        shoal_error(INIT, "%zu settings, more than the %d whose bad values can be reported "
                    "(CONFIG_MAX_ENTRIES in base/config.c)", nreports, CONFIG_MAX_ENTRIES);
    /* Checks a parser cannot make, per component, once everything parsed. */
    for (size_t t = 0; t < ntables; t++)
        tables[t]->sanitize(&c);
    config = c;
    atomic_fetch_add_explicit(&shoal_config_loads, 1, memory_order_release);
}

const shoal_config_t *shoal_config_get(void)
{
    pthread_once(&config_once, config_load);
    return &config;
}

void shoal_config_reload(void)
{
    pthread_once(&config_once, config_load);
    config_load();
}

void shoal_config_use_nccl_env(void)
{
    atomic_store_explicit(&config_nccl_env, 1, memory_order_release);
    unsigned before = atomic_load_explicit(&shoal_config_loads, memory_order_acquire);
    pthread_once(&config_once, config_load);
    if (atomic_load_explicit(&shoal_config_loads, memory_order_acquire) == before)
        config_load();
}

const char *shoal_config_env(const char *name)
{
    const char *v = getenv(name);
    return v && v[0] ? v : NULL;
}

void shoal_config_print(FILE *out)
{
    shoal_config_get();
    int aliases = atomic_load_explicit(&config_nccl_env, memory_order_acquire);
    for (size_t t = 0; t < ntables; t++) {
        fprintf(out, "[%s]\n", tables[t]->component);
        for (size_t i = 0; i < tables[t]->count; i++) {
            const shoal_config_entry_t *e = &tables[t]->entries[i];
            char buf[SHOAL_CONFIG_STR_MAX], note[512];
            const char *cur;
            config_source_t src = config_text(e, aliases, buf, note, sizeof(note), &cur);
            if (src != SOURCE_DEFAULT && e->parse == shoal_config_field_secret)
                cur = "(set, not shown)";
            fprintf(out, "  %-22s default=\"%s\" current=\"%s\"%s%s%s\n      %s", e->name,
                    e->def, cur, src == SOURCE_NCCL ? " (from " : "",
                    src == SOURCE_NCCL ? e->nccl_name : "", src == SOURCE_NCCL ? ")" : "",
                    e->doc);
            if (e->nccl_name)
                fprintf(out, " [NCCL alias: %s%s]", e->nccl_name,
                        aliases ? "" : ", honoured by libnccl");
            fputc('\n', out);
        }
    }
}

size_t shoal_config_count(void)
{
    shoal_config_get();
    size_t n = 0;
    for (size_t t = 0; t < ntables; t++)
        n += tables[t]->count;
    return n;
}

const shoal_config_entry_t *shoal_config_at(size_t i)
{
    shoal_config_get();
    for (size_t t = 0; t < ntables; t++) {
        if (i < tables[t]->count)
            return &tables[t]->entries[i];
        i -= tables[t]->count;
    }
    return NULL;
}

const shoal_config_entry_t *shoal_config_find(const char *name)
{
    int aliases = atomic_load_explicit(&config_nccl_env, memory_order_acquire);
    const shoal_config_entry_t *e;
    for (size_t i = 0; name && (e = shoal_config_at(i)) != NULL; i++) {
        if (!strcmp(e->name, name) || (aliases && e->nccl_name && !strcmp(e->nccl_name, name)))
            return e;
    }
    return NULL;
}

const char *shoal_config_text(const shoal_config_entry_t *e, char *buf)
{
    const shoal_config_entry_t *x;
    buf[0] = '\0';
    for (size_t i = 0; i < CONFIG_MAX_ENTRIES && (x = shoal_config_at(i)) != NULL; i++) {
        if (x == e) {
            snprintf(buf, SHOAL_CONFIG_STR_MAX, "%s", loaded_text[i]);
            break;
        }
    }
    return buf;
}

size_t shoal_config_chunk(const shoal_config_t *c, int networked)
{
    if (c->algo.chunk_size)
        return c->algo.chunk_size;
    return networked ? SHOAL_CHUNK_NET : SHOAL_CHUNK_LOCAL;
}

size_t shoal_config_stream_min(const shoal_config_t *c, int nlocal)
{
    if (c->algo.stream_min)
        return c->algo.stream_min;
    long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (llc <= 0)
        llc = sysconf(_SC_LEVEL2_CACHE_SIZE);
    if (llc <= 0)
        llc = 8l << 20;
    size_t min = (size_t)llc / 2 / (size_t)(nlocal > 0 ? nlocal : 1);
    return min > SHOAL_CHUNK_LOCAL ? min : SHOAL_CHUNK_LOCAL;
}
