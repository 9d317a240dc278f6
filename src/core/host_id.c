/* Host identity: which ranks share a machine (and so shared memory). The
 * boot id tells apart containers or VMs that share a host name. */
#include "comm.h"
#include "base/config.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

void shoal_host_id(char out[SHOAL_HOST_ID_MAX])
{
    const shoal_config_t *cfg = shoal_config_get();
    if (cfg->core.host_id[0]) {
        snprintf(out, SHOAL_HOST_ID_MAX, "%s", cfg->core.host_id);
        return;
    }
    char host[64] = "";
    char boot[40] = "";
    gethostname(host, sizeof(host) - 1);
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        if (!fgets(boot, sizeof(boot), f))
            boot[0] = '\0';
        fclose(f);
        boot[strcspn(boot, "\n")] = '\0';
    }
    snprintf(out, SHOAL_HOST_ID_MAX, "%s/%s", host, boot);
}
