/* Status strings, generated from the one list in shoal.h. */
#include "shoal.h"

static const char *const status_strings[] = {
#define SHOAL_STATUS_STRING_(name, str) str,
    SHOAL_STATUS_LIST(SHOAL_STATUS_STRING_)
#undef SHOAL_STATUS_STRING_
};

const char *shoal_status_string(shoal_status_t status)
{
    if ((unsigned)status >= SHOAL_STATUS_COUNT)
        return "unknown status";
    return status_strings[status];
}

int shoal_version(void)
{
    return SHOAL_VERSION_MAJOR * 10000 + SHOAL_VERSION_MINOR * 100 + SHOAL_VERSION_PATCH;
}
