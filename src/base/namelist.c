/* Lists of device names in NCCL's syntax (namelist.h). */
#include "namelist.h"

#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Whether one item of a list (its "=" already taken off) names name and
 * port. */
static int item_names(char *item, int exact, const char *name, int port)
{
    if (port > 0) {
        char *colon = strrchr(item, ':');
        if (colon) {
            char *end;
            long p = strtol(colon + 1, &end, 10);
            if (end == colon + 1 || *end || p != port)
                return 0;
            *colon = '\0';
        }
    }
    if (exact)
        return !strcmp(item, name);
    return item[0] && !strncmp(item, name, strlen(item));
}

int shoal_namelist_selects(const char *spec, const char *name, int port)
{
    if (!spec[0])
        return 1;
    int exclude = spec[0] == '^';
    spec += exclude;
    int all_exact = spec[0] == '=';
    spec += all_exact;
    char buf[SHOAL_CONFIG_STR_MAX];
    snprintf(buf, sizeof(buf), "%s", spec);
    int listed = 0;
    for (char *save, *tok = strtok_r(buf, ",", &save); tok && !listed;
         tok = strtok_r(NULL, ",", &save)) {
        int exact = all_exact || tok[0] == '=';
        if (tok[0] == '=')
            tok++;
        listed = item_names(tok, exact, name, port);
    }
    return exclude ? !listed : listed;
}
