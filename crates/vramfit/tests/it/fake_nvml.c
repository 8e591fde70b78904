/* A stand-in for the NVIDIA driver's libnvidia-ml.so, for the test of a live `vramfit measure`
 * on machines without a GPU: one device whose compute processes are read, at every query,
 * from the file VRAMFIT_FAKE_NVML_PROCS names ("PID BYTES" per line), as the driver would
 * report them. Only the functions vramfit calls are here; vramfit loads it at run time through
 * VRAMFIT_NVML_LIB exactly as it loads the real library. Built by the test with `cc -shared`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct { unsigned int version; unsigned long long total, reserved, free, used; } nvmlMemory_v2_t;
typedef struct { unsigned int pid; unsigned long long usedGpuMemory; unsigned int gpuInstanceId, computeInstanceId; } nvmlProcessInfo_t;

#define TOTAL (80ULL << 30)
#define MAX_PROCS 64
static int device_token;

static unsigned int read_procs(nvmlProcessInfo_t *out) {
    const char *path = getenv("VRAMFIT_FAKE_NVML_PROCS");
    FILE *f = path ? fopen(path, "r") : NULL;
    unsigned int n = 0, pid;
    unsigned long long bytes;
    if (!f) return 0;
    while (n < MAX_PROCS && fscanf(f, "%u %llu", &pid, &bytes) == 2) {
        out[n].pid = pid;
        out[n].usedGpuMemory = bytes;
        out[n].gpuInstanceId = out[n].computeInstanceId = 0xFFFFFFFF;
        n++;
    }
    fclose(f);
    return n;
}

int nvmlInit_v2(void) { return 0; }
int nvmlShutdown(void) { return 0; }
int nvmlDeviceGetCount_v2(unsigned int *count) { *count = 1; return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void **device) {
    if (index != 0) return 2; /* NVML_ERROR_INVALID_ARGUMENT */
    *device = &device_token;
    return 0;
}
int nvmlDeviceGetName(void *device, char *name, unsigned int length) {
    (void)device;
    snprintf(name, length, "Fake NVML device");
    return 0;
}
int nvmlDeviceGetMemoryInfo_v2(void *device, nvmlMemory_v2_t *memory) {
    nvmlProcessInfo_t procs[MAX_PROCS];
    unsigned int n = read_procs(procs);
    unsigned long long used = 100ULL << 20;
    (void)device;
    for (unsigned int i = 0; i < n; i++) used += procs[i].usedGpuMemory;
    memory->total = TOTAL;
    memory->reserved = 0;
    memory->used = used;
    memory->free = TOTAL - used;
    return 0;
}
int nvmlDeviceGetComputeRunningProcesses_v3(void *device, unsigned int *count, nvmlProcessInfo_t *infos) {
    nvmlProcessInfo_t procs[MAX_PROCS];
    unsigned int n = read_procs(procs);
    (void)device;
    if (infos == NULL || *count < n) {
        *count = n;
        return n == 0 ? 0 : 7; /* NVML_ERROR_INSUFFICIENT_SIZE */
    }
    memcpy(infos, procs, n * sizeof *procs);
    *count = n;
    return 0;
}
const char *nvmlErrorString(int result) { (void)result; return "fake NVML error"; }
