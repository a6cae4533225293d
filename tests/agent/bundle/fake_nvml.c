/* A fake libnvidia-ml.so.1 for tests/agent/bundle_test.cpp: the NVML entry points
 * agent/nvml.cpp uses, with fixed values for two GPUs:
 *
 *   GPU i   utilization (40 + 10 i) %   memory used (i + 1) GiB   power (150 + 25 i) W   temperature (55 + 7 i) C
 *
 * Declared from NVML's documented C API (return code 0 is NVML_SUCCESS). */
#include <stddef.h>

typedef struct { unsigned int gpu, memory; } utilization_t;
typedef struct { unsigned long long total, free, used; } memory_t;
typedef void *device_t;

enum { SUCCESS = 0, INVALID_ARGUMENT = 2, NOT_SUPPORTED = 3, GPUS = 2 };
static int devices[GPUS];

static int index_of(device_t d) {
  for (int i = 0; i < GPUS; ++i)
    if (d == &devices[i]) return i;
  return -1;
}

int nvmlInit_v2(void) { return SUCCESS; }
int nvmlShutdown(void) { return SUCCESS; }

int nvmlDeviceGetCount_v2(unsigned int *count) {
  if (!count) return INVALID_ARGUMENT;
  *count = GPUS;
  return SUCCESS;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int index, device_t *device) {
  if (index >= GPUS || !device) return INVALID_ARGUMENT;
  *device = &devices[index];
  return SUCCESS;
}

int nvmlDeviceGetUtilizationRates(device_t device, utilization_t *u) {
  int i = index_of(device);
  if (i < 0 || !u) return INVALID_ARGUMENT;
  u->gpu = 40u + 10u * (unsigned)i;
  u->memory = 20u;
  return SUCCESS;
}

int nvmlDeviceGetMemoryInfo(device_t device, memory_t *m) {
  int i = index_of(device);
  if (i < 0 || !m) return INVALID_ARGUMENT;
  m->total = 80ull << 30;
  m->used = ((unsigned long long)i + 1) << 30;
  m->free = m->total - m->used;
  return SUCCESS;
}

int nvmlDeviceGetPowerUsage(device_t device, unsigned int *milliwatts) {
  int i = index_of(device);
  if (i < 0 || !milliwatts) return INVALID_ARGUMENT;
  *milliwatts = 150000u + 25000u * (unsigned)i;
  return SUCCESS;
}

int nvmlDeviceGetTemperature(device_t device, int sensor, unsigned int *celsius) {
  int i = index_of(device);
  if (i < 0 || !celsius) return INVALID_ARGUMENT;
  if (sensor != 0) return NOT_SUPPORTED;
  *celsius = 55u + 7u * (unsigned)i;
  return SUCCESS;
}
