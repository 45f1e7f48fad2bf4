/* A stand-in for the NVIDIA driver's NVML library (libnvidia-ml.so.1), for tests on machines
 * without a GPU: memtrack loads it through MEMTRACK_NVML_LIB. Only the functions memtrack
 * calls, with NVML's signatures and struct layouts (nvml.h).
 *
 * Two GPUs, 16 GiB each. The processes it reports:
 *   FAKE_NVML_PROCESSES="GPU:PID:BYTES;..."  as given;
 *   FAKE_NVML_SCAN_COMM=python                every process whose name starts with that, on
 *                                             GPU 0, with its resident memory as GPU memory.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int nvmlReturn_t;
#define NVML_SUCCESS 0
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_INSUFFICIENT_SIZE 7

typedef struct { int index; } fake_device;
static fake_device devices[2] = {{0}, {1}};
typedef fake_device *nvmlDevice_t;

typedef struct {
    char busIdLegacy[16];
    unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

typedef struct {
    unsigned version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;

typedef struct {
    unsigned pid;
    unsigned long long usedGpuMemory;
    unsigned gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;

#define TOTAL (16ULL << 30)
#define RESERVED (256ULL << 20)
#define MAX_PROCS 512

nvmlReturn_t nvmlInit_v2(void) { return NVML_SUCCESS; }
nvmlReturn_t nvmlShutdown(void) { return NVML_SUCCESS; }
const char *nvmlErrorString(nvmlReturn_t r) { (void)r; return "fake NVML error"; }

nvmlReturn_t nvmlSystemGetDriverVersion(char *v, unsigned n) {
    snprintf(v, n, "999.99.99-fake");
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) { *v = 12040; return NVML_SUCCESS; }
nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v) { *v = 12040; return NVML_SUCCESS; }
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned *c) { *c = 2; return NVML_SUCCESS; }

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned i, nvmlDevice_t *d) {
    if (i >= 2) return NVML_ERROR_INVALID_ARGUMENT;
    *d = &devices[i];
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned len) {
    snprintf(name, len, "Fake GPU %d", d->index);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned len) {
    snprintf(uuid, len, "GPU-00000000-0000-4000-8000-00000000000%d", d->index);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *p) {
    memset(p, 0, sizeof *p);
    snprintf(p->busId, sizeof p->busId, "00000000:%02X:00.0", 0x10 + d->index);
    return NVML_SUCCESS;
}

static int processes(int dev, nvmlProcessInfo_t *out) {
    int n = 0;
    const char *given = getenv("FAKE_NVML_PROCESSES");
    if (given) {
        char *copy = strdup(given), *save = NULL;
        for (char *tok = strtok_r(copy, ";", &save); tok && n < MAX_PROCS;
             tok = strtok_r(NULL, ";", &save)) {
            int g;
            unsigned pid;
            unsigned long long bytes;
            if (sscanf(tok, "%d:%u:%llu", &g, &pid, &bytes) == 3 && g == dev) {
                nvmlProcessInfo_t p = {pid, bytes, 0xFFFFFFFFu, 0xFFFFFFFFu};
                out[n++] = p;
            }
        }
        free(copy);
    }
    const char *comm = getenv("FAKE_NVML_SCAN_COMM");
    if (comm && dev == 0) {
        DIR *proc = opendir("/proc");
        struct dirent *e;
        while (proc && (e = readdir(proc)) && n < MAX_PROCS) {
            unsigned pid = (unsigned)strtoul(e->d_name, NULL, 10);
            if (pid == 0) continue;
            char path[64], name[64] = {0};
            snprintf(path, sizeof path, "/proc/%u/comm", pid);
            FILE *f = fopen(path, "r");
            if (!f) continue;
            if (!fgets(name, sizeof name, f)) name[0] = 0;
            fclose(f);
            if (strncmp(name, comm, strlen(comm)) != 0) continue;
            snprintf(path, sizeof path, "/proc/%u/statm", pid);
            f = fopen(path, "r");
            unsigned long long size = 0, resident = 0;
            if (f) {
                if (fscanf(f, "%llu %llu", &size, &resident) != 2) resident = 0;
                fclose(f);
            }
            nvmlProcessInfo_t p = {pid, resident * 4096ULL, 0xFFFFFFFFu, 0xFFFFFFFFu};
            out[n++] = p;
        }
        if (proc) closedir(proc);
    }
    return n;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned *count,
                                                     nvmlProcessInfo_t *infos) {
    static nvmlProcessInfo_t found[MAX_PROCS];
    int n = processes(d->index, found);
    if (infos == NULL || *count < (unsigned)n) {
        *count = (unsigned)n;
        return n == 0 ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
    }
    memcpy(infos, found, (size_t)n * sizeof *infos);
    *count = (unsigned)n;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t d, unsigned *count,
                                                      nvmlProcessInfo_t *infos) {
    (void)d;
    (void)infos;
    *count = 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m) {
    static nvmlProcessInfo_t found[MAX_PROCS];
    int n = processes(d->index, found);
    unsigned long long used = 0;
    for (int i = 0; i < n; i++) used += found[i].usedGpuMemory;
    m->total = TOTAL;
    m->reserved = RESERVED;
    m->used = used;
    m->free = TOTAL - RESERVED - used;
    return NVML_SUCCESS;
}
