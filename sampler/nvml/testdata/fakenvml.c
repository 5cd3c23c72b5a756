/*
 * A stand-in libnvidia-ml.so.1 for tests on machines without a GPU. The
 * tests compile it with gcc and load it with nvml.New(nvml.WithLibraryPath).
 *
 * Built with -DFAKE_OLD_DRIVER it exports only an older driver's symbols
 * (no nvmlDeviceGetTemperatureV, no nvmlDeviceGetCurrentClocksEventReasons):
 * a caller that calls them dies with "symbol lookup error".
 *
 * Configuration, read at nvmlInit (environment):
 *   FAKENVML_VERSION    NVML version string (default "13.590.44.01")
 *   FAKENVML_DEVICES    number of GPUs (default 1)
 *   FAKENVML_CLOCK      "realtime" (default) or "boottime" sample timestamps
 *   FAKENVML_PERIOD_US  sample period of every buffer (default 20000)
 *   FAKENVML_PERIODS_US per-type periods overriding FAKENVML_PERIOD_US,
 *                       comma-separated "<type>:<µs>" (e.g. "1:166667,5:100000")
 *   FAKENVML_DEPTH      samples a buffer holds (default 100)
 *   FAKENVML_DEPTHS     per-type depths overriding FAKENVML_DEPTH,
 *                       comma-separated "<type>:<n>" (e.g. "0:20000": a very
 *                       deep power buffer)
 *   FAKENVML_IDLE_MS    idle windows of single buffers: comma-separated
 *                       "<type>@<from>-<to>", ms after the first nvmlInit of
 *                       the process on the driver's clock; either bound may
 *                       be left out ("3@-4000": the encoder took no sample
 *                       before 4 s after init, none of its history either;
 *                       "1@2000-": GPU utilization idles from 2 s on). A
 *                       buffer holds its depth newest samples taken outside
 *                       its idle windows (an idle engine takes none).
 *   FAKENVML_REPORTED_DEPTH  what the size query (samples == NULL) answers
 *                       (default FAKENVML_DEPTH); a larger value fakes a
 *                       driver whose buffer holds less than it says
 *   FAKENVML_UNSUPPORTED comma-separated field ids answering NOT_SUPPORTED
 *   FAKENVML_IDLE       "1": utilization buffers stay empty (idle GPU)
 *   FAKENVML_BUFFER_NS  "all" or comma-separated sample-buffer types for
 *                       which nvmlDeviceGetSamples answers NOT_SUPPORTED
 *                       (some platforms and virtualised GPUs); the point
 *                       getters still answer
 *   FAKENVML_INIT_RET   return code of nvmlInit (default 0)
 *   FAKENVML_NO_GPM     "1": GPM query says the device is not supported
 *   FAKENVML_FAN        fan speed percent, or "ns" (default: not supported,
 *                       a passively cooled board)
 *   FAKENVML_DISPLAY_MODE, FAKENVML_DISPLAY_ACTIVE  0, 1 or "ns" (default 0)
 *   FAKENVML_RETIRED_PENDING  pending page retirement: 0, 1 or "ns"
 *                       (default "ns": page retirement is pre-Ampere)
 *   FAKENVML_ENCODER_STATS, FAKENVML_FBC_STATS  "<sessions>,<fps>,<latency µs>"
 *                       or "ns" (default "0,0,0")
 *   FAKENVML_MEDIA_UTIL "<encoder>,<decoder>,<jpeg>,<ofa>" point-read
 *                       utilization percent, or "ns" (default "0,0,0,0")
 *   FAKENVML_CUDA       CUDA driver version (12080), or "ns": not supported
 *   FAKENVML_VBIOS      "ns": the VBIOS version is not supported
 *   FAKENVML_FIELDS_NS  "1": nvmlDeviceGetFieldValues answers NOT_SUPPORTED
 *                       for the whole call (the dedicated getters still
 *                       answer)
 *   FAKENVML_GETTERS_NS comma-separated dedicated getters answering
 *                       NOT_SUPPORTED: energy (GetTotalEnergyConsumption),
 *                       thermal (GetThermalSettings), violation
 *                       (GetViolationStatus), pcie (GetPcieThroughput), ecc
 *                       (GetTotalEccErrors), remap (GetRemappedRows),
 *                       retired (GetRetiredPages), nvlink
 *                       (GetNvLinkErrorCounter)
 *   FAKENVML_NVLINKS    number of NVLink links whose error counters answer
 *                       (default 4); their sums are fields 52, 59, 38, 45
 *   FAKENVML_RETIRED    "<sbe>,<dbe>": pages retired for multiple single-bit
 *                       and for double-bit ECC errors, as fields 29/30 and
 *                       GetRetiredPages' lists give them (default "0,0")
 *   FAKENVML_EVENTS     "ns": nvmlDeviceGetSupportedEventTypes answers
 *                       NOT_SUPPORTED (driver events off: no event set is
 *                       waited on)
 *   FAKENVML_CALLS_FILE at nvmlShutdown, write "<index> <calls>" per device
 *   FAKENVML_TIME_FILE  when this file exists, it holds the time (Unix µs,
 *                       decimal) that every clock of the fake reads: a
 *                       test's manual clock drives the driver too (boot
 *                       time keeps its real distance from realtime)
 *   FAKENVML_FUNCS_FILE at nvmlShutdown, write the calls per NVML function
 *                       ("call <function> <n>"), the buffer samples handed
 *                       out ("samples <type> <n>"), "devices <n>" and
 *                       "window_s <seconds>", counted from
 *                       FAKENVML_COUNT_FROM_MS after nvmlInit (default 0)
 *                       to nvmlShutdown: an account of the caller's cost
 *                       that does not rely on the caller's own
 *                       bookkeeping ("call nvmlDeviceGetSamples.size" is
 *                       the part of nvmlDeviceGetSamples that were size
 *                       queries)
 *   FAKENVML_CTL_DIR    fault injection while running, by files in this
 *                       directory (the test creates and removes them):
 *                         noload    nvmlInit answers DRIVER_NOT_LOADED
 *                         lost<N>   device N answers GPU_IS_LOST
 *                         hang<N>   calls on device N block while it exists;
 *                                   a blocked call creates hanging<N>
 *                         xid<N>    holds an XID code: the event set
 *                                   delivers it once and removes the file
 *                         allns     every telemetry call and field answers
 *                                   NOT_SUPPORTED, except the power and
 *                                   GPU-utilization buffers
 *
 * Samples of every buffer are taken at the multiples of its period; like a
 * real driver's, the buffers are already full of history at nvmlInit; sample k of type t has value fakeValue(t, k), so a test can
 * check that each one is delivered exactly once. The module-power buffer is
 * not supported. Field ids outside the configured NVML version's range
 * (throttle time 251-253 before 12.9 or from 13.1, 269-271 before 13.1,
 * PCIe byte counters before 12.4) abort the process: asking for them on a
 * real driver of that version would read something else.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int nvmlReturn_t;
#define OK 0
#define E_UNINIT 1
#define E_INVALID 2
#define E_NOT_SUPPORTED 3
#define E_NOT_FOUND 6
#define E_INSUFFICIENT 7
#define E_DRIVER_NOT_LOADED 9
#define E_TIMEOUT 10
#define E_GPU_LOST 15

typedef union { double d; unsigned int ui; unsigned long ul; unsigned long long ull; long long sll; int si; unsigned short us; } nvmlValue_t;
typedef struct { unsigned long long timeStamp; nvmlValue_t sampleValue; } nvmlSample_t;
typedef struct {
	unsigned int fieldId, scopeId;
	long long timestamp, latencyUsec;
	unsigned int valueType, nvmlReturn;
	nvmlValue_t value;
} nvmlFieldValue_t;
typedef struct { char busIdLegacy[16]; unsigned int domain, bus, device, pciDeviceId, pciSubSystemId; char busId[32]; } nvmlPciInfo_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned int version; unsigned long long total, reserved, free, used; } nvmlMemory_v2_t;
typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;
typedef struct { unsigned int version; int sensorType; int temperature; } nvmlTemperature_t;

#define MAXDEV 16
struct fakedev { int index; long calls; };
static struct fakedev devs[MAXDEV];
static int ndev = 1, initialized, branch = 590, major = 13, idle;
static char version[64] = "13.590.44.01";
static clockid_t clk = CLOCK_REALTIME;
static unsigned long long period = 20000, depth = 100, reported;
static unsigned long long periods[10], startK[10], depths[10]; /* per buffer type */
/* Idle windows (FAKENVML_IDLE_MS), in driver-clock µs. */
struct idlewin { int type; unsigned long long from, to; };
static struct idlewin idles[32];
static int nidle;
static unsigned long long firstInitUS;
static unsigned int unsupported[64];
static int nunsupported;
static unsigned int bufferNS; /* bit t: buffer type t is not supported */

static const char *timeFile;

static unsigned long long clockUS(clockid_t c) {
	struct timespec ts;
	clock_gettime(c, &ts);
	return (unsigned long long)ts.tv_sec * 1000000ull + ts.tv_nsec / 1000;
}

static unsigned long long nowUS(clockid_t c) {
	if (timeFile) {
		FILE *f = fopen(timeFile, "r");
		unsigned long long us;
		if (f) {
			int ok = fscanf(f, "%llu", &us) == 1;
			fclose(f);
			if (ok) {
				if (c == CLOCK_BOOTTIME) us -= clockUS(CLOCK_REALTIME) - clockUS(CLOCK_BOOTTIME);
				return us;
			}
		}
	}
	return clockUS(c);
}

static const char *ctl;

/* ctlFile reports whether control file name<dev> (dev < 0: name) exists. */
static int ctlFile(const char *name, int dev) {
	char path[512];
	if (!ctl) return 0;
	if (dev < 0) snprintf(path, sizeof path, "%s/%s", ctl, name);
	else snprintf(path, sizeof path, "%s/%s%d", ctl, name, dev);
	return access(path, F_OK) == 0;
}

/* Per-function call counts (FAKENVML_FUNCS_FILE): slots keyed by the
 * function's __func__ pointer, claimed with a CAS on first use. */
#define NFUNCS 96
static const char *fnName[NFUNCS];
static long fnCalls[NFUNCS];
static long samplesOut[16];
static unsigned long long countFromUS, initMonoUS;
static int counting;

static int countNow(void) {
	return counting && clockUS(CLOCK_MONOTONIC) >= countFromUS;
}

static void countCall(const char *fn) {
	if (!countNow()) return;
	for (int i = 0; i < NFUNCS; i++) {
		const char *p = __atomic_load_n(&fnName[i], __ATOMIC_ACQUIRE);
		if (!p) {
			const char *want = 0;
			if (__atomic_compare_exchange_n(&fnName[i], &want, fn, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) p = fn;
			else p = want;
		}
		if (p == fn) {
			__atomic_add_fetch(&fnCalls[i], 1, __ATOMIC_RELAXED);
			return;
		}
	}
}

static void writeFuncs(void) {
	const char *f = getenv("FAKENVML_FUNCS_FILE");
	if (!f || !counting) return;
	FILE *fp = fopen(f, "w");
	if (!fp) return;
	unsigned long long end = clockUS(CLOCK_MONOTONIC);
	double window = end > countFromUS ? (end - countFromUS) / 1e6 : 0;
	fprintf(fp, "devices %d\nwindow_s %.3f\n", ndev, window);
	for (int i = 0; i < NFUNCS && fnName[i]; i++) fprintf(fp, "call %s %ld\n", fnName[i], fnCalls[i]);
	for (int t = 0; t < 16; t++)
		if (samplesOut[t]) fprintf(fp, "samples %d %ld\n", t, samplesOut[t]);
	fclose(fp);
}

static struct fakedev *Dcheck(void *h, const char *fn) {
	struct fakedev *d = h;
	countCall(fn);
	if (!initialized || d < devs || d >= devs + ndev) {
		fprintf(stderr, "fakenvml: call with a bad handle or before init\n");
		abort();
	}
	__atomic_add_fetch(&d->calls, 1, __ATOMIC_RELAXED);
	if (ctlFile("hang", d->index)) {
		/* say so (hanging<N>), so a test knows the call is in */
		char path[512];
		snprintf(path, sizeof path, "%s/hanging%d", ctl, d->index);
		FILE *f = fopen(path, "w");
		if (f) fclose(f);
		while (ctlFile("hang", d->index)) usleep(1000);
		unlink(path);
	}
	return d;
}

/* D validates a handle and counts the call; a lost device's call returns
 * GPU_IS_LOST from the calling function (a GCC statement expression), and
 * with allns every telemetry call answers NOT_SUPPORTED (NS). */
#define D(h) ({ struct fakedev *d__ = Dcheck(h, __func__); if (ctlFile("lost", d__->index)) return E_GPU_LOST; d__; })
#define NS() do { if (ctlFile("allns", -1)) return E_NOT_SUPPORTED; } while (0)

nvmlReturn_t nvmlInit_v2(void) {
	const char *s;
	if ((s = getenv("FAKENVML_INIT_RET")) && atoi(s)) return atoi(s);
	ctl = getenv("FAKENVML_CTL_DIR");
	timeFile = getenv("FAKENVML_TIME_FILE");
	if (ctlFile("noload", -1)) return E_DRIVER_NOT_LOADED;
	if ((s = getenv("FAKENVML_VERSION"))) snprintf(version, sizeof version, "%s", s);
	sscanf(version, "%d.%d", &major, &branch);
	if ((s = getenv("FAKENVML_DEVICES"))) ndev = atoi(s);
	if (ndev < 1 || ndev > MAXDEV) ndev = 1;
	if ((s = getenv("FAKENVML_CLOCK")) && !strcmp(s, "boottime")) clk = CLOCK_BOOTTIME;
	if ((s = getenv("FAKENVML_PERIOD_US"))) period = strtoull(s, 0, 10);
	if ((s = getenv("FAKENVML_DEPTH"))) depth = strtoull(s, 0, 10);
	reported = 0; /* the buffer's depth */
	if ((s = getenv("FAKENVML_REPORTED_DEPTH"))) reported = strtoull(s, 0, 10);
	if ((s = getenv("FAKENVML_IDLE"))) idle = atoi(s);
	if ((s = getenv("FAKENVML_BUFFER_NS"))) {
		char buf[256], *tok, *save;
		snprintf(buf, sizeof buf, "%s", s);
		for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(0, ",", &save))
			bufferNS |= !strcmp(tok, "all") ? ~0u : 1u << (atoi(tok) & 31);
	}
	if ((s = getenv("FAKENVML_UNSUPPORTED"))) {
		char buf[256], *tok, *save;
		snprintf(buf, sizeof buf, "%s", s);
		for (tok = strtok_r(buf, ",", &save); tok && nunsupported < 64; tok = strtok_r(0, ",", &save))
			unsupported[nunsupported++] = atoi(tok);
	}
	for (int i = 0; i < ndev; i++) devs[i].index = i;
	initMonoUS = clockUS(CLOCK_MONOTONIC);
	if (getenv("FAKENVML_FUNCS_FILE")) {
		counting = 1;
		countFromUS = initMonoUS + ((s = getenv("FAKENVML_COUNT_FROM_MS")) ? strtoull(s, 0, 10) * 1000ull : 0);
	}
	for (int t = 0; t < 10; t++) periods[t] = period;
	if ((s = getenv("FAKENVML_PERIODS_US"))) {
		char buf[256], *tok, *save;
		snprintf(buf, sizeof buf, "%s", s);
		for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(0, ",", &save)) {
			unsigned t = 0;
			unsigned long long us = 0;
			if (sscanf(tok, "%u:%llu", &t, &us) == 2 && t < 10 && us > 0) periods[t] = us;
		}
	}
	for (int t = 0; t < 10; t++) depths[t] = depth;
	if ((s = getenv("FAKENVML_DEPTHS"))) {
		char buf[256], *tok, *save;
		snprintf(buf, sizeof buf, "%s", s);
		for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(0, ",", &save)) {
			unsigned t = 0;
			unsigned long long n = 0;
			if (sscanf(tok, "%u:%llu", &t, &n) == 2 && t < 10 && n > 0) depths[t] = n;
		}
	}
	if (!firstInitUS) firstInitUS = nowUS(clk);
	nidle = 0;
	if ((s = getenv("FAKENVML_IDLE_MS"))) {
		char buf[512], *tok, *save;
		snprintf(buf, sizeof buf, "%s", s);
		for (tok = strtok_r(buf, ",", &save); tok && nidle < 32; tok = strtok_r(0, ",", &save)) {
			char *at = strchr(tok, '@'), *dash;
			if (!at || !(dash = strchr(at + 1, '-'))) continue;
			struct idlewin *w = &idles[nidle++];
			w->type = atoi(tok);
			w->from = dash == at + 1 ? 0 : firstInitUS + strtoull(at + 1, 0, 10) * 1000ull;
			w->to = dash[1] ? firstInitUS + strtoull(dash + 1, 0, 10) * 1000ull : ~0ull;
		}
	}
	for (int t = 0; t < 10; t++) {
		unsigned long long k = nowUS(clk) / periods[t] + 1;
		startK[t] = k > depths[t] ? k - depths[t] : 0; /* full of history */
	}
	initialized = 1;
	return OK;
}
nvmlReturn_t nvmlInit(void) { return nvmlInit_v2(); }
nvmlReturn_t nvmlInitWithFlags(unsigned int f) { (void)f; return nvmlInit_v2(); }

nvmlReturn_t nvmlShutdown(void) {
	writeFuncs();
	const char *f = getenv("FAKENVML_CALLS_FILE");
	if (f) {
		FILE *fp = fopen(f, "w");
		if (fp) {
			for (int i = 0; i < ndev; i++) fprintf(fp, "%d %ld\n", i, __atomic_load_n(&devs[i].calls, __ATOMIC_RELAXED));
			fclose(fp);
		}
	}
	initialized = 0;
	return OK;
}

const char *nvmlErrorString(nvmlReturn_t r) { (void)r; return "fake nvml error"; }

nvmlReturn_t nvmlSystemGetNVMLVersion(char *v, unsigned int n) { snprintf(v, n, "%s", version); return OK; }
nvmlReturn_t nvmlSystemGetDriverVersion(char *v, unsigned int n) { snprintf(v, n, "%s", strchr(version, '.') + 1); return OK; }
nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v) { *v = major * 1000; return OK; }
/* FAKENVML_CUDA: the CUDA driver version (1000*major + 10*minor; default
 * major*1000) or "ns" (not supported). */
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) {
	const char *s = getenv("FAKENVML_CUDA");
	if (s && !strcmp(s, "ns")) return E_NOT_SUPPORTED;
	*v = s ? atoi(s) : major * 1000;
	return OK;
}
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n) { if (!initialized) return E_UNINIT; *n = ndev; return OK; }
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, void **h) {
	countCall(__func__);
	if (!initialized) return E_UNINIT;
	if (i >= (unsigned)ndev) return E_INVALID;
	if (ctlFile("lost", i)) return E_GPU_LOST;
	*h = &devs[i];
	__atomic_add_fetch(&devs[i].calls, 1, __ATOMIC_RELAXED);
	return OK;
}

nvmlReturn_t nvmlDeviceGetUUID(void *h, char *s, unsigned int n) { snprintf(s, n, "GPU-fake-0000-%04d", D(h)->index); return OK; }
nvmlReturn_t nvmlDeviceGetName(void *h, char *s, unsigned int n) { D(h); snprintf(s, n, "NVIDIA Fake H200"); return OK; }
nvmlReturn_t nvmlDeviceGetSerial(void *h, char *s, unsigned int n) { snprintf(s, n, "FAKE%08d", D(h)->index); return OK; }
/* FAKENVML_VBIOS=ns: the VBIOS version is not supported. */
nvmlReturn_t nvmlDeviceGetVbiosVersion(void *h, char *v, unsigned int n) {
	const char *s = getenv("FAKENVML_VBIOS");
	int i = D(h)->index;
	if (s && !strcmp(s, "ns")) return E_NOT_SUPPORTED;
	snprintf(v, n, "96.00.89.00.%02d", i + 1);
	return OK;
}
nvmlReturn_t nvmlDeviceGetIndex(void *h, unsigned int *i) { *i = D(h)->index; return OK; }
nvmlReturn_t nvmlDeviceGetPciInfo_v3(void *h, nvmlPciInfo_t *p) {
	int i = D(h)->index;
	memset(p, 0, sizeof *p);
	snprintf(p->busId, sizeof p->busId, "00000000:%02X:00.0", 0x18 + i);
	snprintf(p->busIdLegacy, sizeof p->busIdLegacy, "0000:%02X:00.0", 0x18 + i);
	p->bus = 0x18 + i;
	return OK;
}
nvmlReturn_t nvmlDeviceGetMemoryInfo(void *h, nvmlMemory_t *m) {
	D(h);
	NS();
	m->total = 143771ull << 20; m->used = 1024ull << 20; m->free = m->total - m->used;
	return OK;
}
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(void *h, nvmlMemory_v2_t *m) {
	D(h);
	NS();
	m->total = 143771ull << 20; m->reserved = 512ull << 20; m->used = 1024ull << 20;
	m->free = m->total - m->used - m->reserved;
	return OK;
}
nvmlReturn_t nvmlDeviceGetTemperatureThreshold(void *h, int t, unsigned int *v) {
	D(h);
	switch (t) {
	case 0: *v = 92; return OK;  /* shutdown */
	case 1: *v = 89; return OK;  /* slowdown */
	case 2: *v = 95; return OK;  /* memory max */
	case 3: *v = 87; return OK;  /* gpu max */
	}
	return E_NOT_SUPPORTED;
}

/* taken reports whether buffer type t took a sample at us (driver clock):
 * not within one of its idle windows. */
static int taken(int t, unsigned long long us) {
	for (int i = 0; i < nidle; i++)
		if (idles[i].type == t && us >= idles[i].from && us < idles[i].to) return 0;
	return 1;
}

/* fakeValue is the value of sample k of buffer type t, in NVML units. */
static unsigned int fakeValue(int t, unsigned long long k) {
	switch (t) {
	case 0: return 100000 + (unsigned)(k % 1000) * 100; /* mW */
	case 5: return 1000 + (unsigned)(k % 980);          /* MHz */
	case 6: return 2619;
	default: return (unsigned)(k % 101);                 /* % */
	}
}

nvmlReturn_t nvmlDeviceGetSamples(void *h, int type, unsigned long long last, int *valType, unsigned int *count, nvmlSample_t *samples) {
	D(h);
	if (type == 7) return E_NOT_SUPPORTED; /* module power: Grace Hopper only */
	if (type >= 0 && type < 32 && (bufferNS >> type & 1)) return E_NOT_SUPPORTED;
	if (type > 1) NS();
	if (type < 0 || type > 9) return E_INVALID;
	if (!samples) { /* size query: the buffer's capacity */
		static const char sizeq[] = "nvmlDeviceGetSamples.size";
		countCall(sizeq);
		*count = reported ? reported : depths[type];
		*valType = type == 6 ? 3 : 1;
		return OK;
	}
	if (idle && (type == 1 || type == 2)) return E_NOT_FOUND;
	unsigned long long period = periods[type], depth = depths[type];
	unsigned long long newest = nowUS(clk) / period;
	unsigned long long first = last / period + 1;
	/* The buffer holds the depth newest samples taken (none in an idle
	 * window), none from before its history at init. */
	unsigned long long held = 0, oldest = newest + 1;
	while (oldest > startK[type] && oldest > 0 && held < depth) {
		oldest--;
		if (taken(type, oldest * period)) held++;
	}
	if (first < oldest) first = oldest;
	if (first > newest) return E_NOT_FOUND;
	unsigned long long n = 0;
	for (unsigned long long k = first; k <= newest; k++) n += taken(type, k * period);
	if (n == 0) return E_NOT_FOUND;
	if (n > *count) return E_INSUFFICIENT;
	for (unsigned long long i = 0, k = first; i < n; k++) {
		if (!taken(type, k * period)) continue;
		samples[i].timeStamp = k * period;
		if (type == 6) { /* unsigned long long */
			*valType = 3;
			samples[i].sampleValue.ull = fakeValue(type, k);
		} else { /* unsigned int, with garbage in the high bytes */
			*valType = 1;
			samples[i].sampleValue.ull = 0xdeadbeef00000000ull | fakeValue(type, k);
		}
		i++;
	}
	*count = n;
	if (countNow() && type >= 0 && type < 16) __atomic_add_fetch(&samplesOut[type], (long)n, __ATOMIC_RELAXED);
	return OK;
}

static int forbidden(unsigned int id) {
	int api = major * 100 + (branch >= 590 ? 31 : branch >= 580 ? 30 : branch >= 575 ? 29 : branch >= 550 ? 24 : 22);
	if (id >= 251 && id <= 253) return api < 1229 || api >= 1331;
	if (id >= 269 && id <= 271) return api < 1331;
	if (id == 197 || id == 198) return api < 1224;
	return 0;
}

/* getterNS reports whether FAKENVML_GETTERS_NS names getter g. */
static int getterNS(const char *g) {
	const char *s = getenv("FAKENVML_GETTERS_NS");
	size_t n = strlen(g);
	while (s && *s) {
		if (!strncmp(s, g, n) && (s[n] == ',' || !s[n])) return 1;
		s = strchr(s, ',');
		if (s) s++;
	}
	return 0;
}

/* retiredPages is the number of pages retired for cause c (0 multiple
 * single-bit, 1 double-bit), from FAKENVML_RETIRED. */
static unsigned int retiredPages(unsigned int c) {
	const char *s = getenv("FAKENVML_RETIRED");
	unsigned int n[2] = {0, 0};
	if (s) sscanf(s, "%u,%u", &n[0], &n[1]);
	return c < 2 ? n[c] : 0;
}

nvmlReturn_t nvmlDeviceGetFieldValues(void *h, int n, nvmlFieldValue_t *v) {
	const char *fns = getenv("FAKENVML_FIELDS_NS");
	D(h);
	if (fns && atoi(fns)) return E_NOT_SUPPORTED;
	unsigned long long now = nowUS(CLOCK_REALTIME);
	for (int i = 0; i < n; i++) {
		unsigned int id = v[i].fieldId;
		if (forbidden(id)) {
			fprintf(stderr, "fakenvml: field %u asked of NVML %s, which defines it differently or not at all\n", id, version);
			abort();
		}
		v[i].timestamp = now;
		v[i].latencyUsec = 0;
		v[i].nvmlReturn = OK;
		v[i].valueType = 3;
		v[i].value.ull = 0;
		for (int j = 0; j < nunsupported; j++)
			if (unsupported[j] == id) v[i].nvmlReturn = E_NOT_SUPPORTED;
		if (ctlFile("allns", -1)) { v[i].nvmlReturn = E_NOT_SUPPORTED; continue; }
		switch (id) {
		case 186: v[i].valueType = 1; v[i].value.ull = 0xdeadbeef00000000ull | 312250; break; /* mW */
		case 83: v[i].value.ull = now / 1000; break;      /* mJ */
		case 82: v[i].valueType = 1; v[i].value.ui = 48; break;
		case 138: case 139: v[i].value.ull = 10; break;   /* KiB */
		case 197: case 198: v[i].value.ull = 1ull << 33; break;
		case 74: case 75: case 76: case 77: case 78: case 79: v[i].value.ull = 1000 * id; break;
		case 251: case 252: case 253: case 269: case 270: case 271: v[i].value.ull = 7 * id; break;
		case 3: case 4: case 94: case 142: case 143: v[i].value.ull = 0; break;
		case 5: v[i].value.ull = 3; break;                /* aggregate SBE */
		case 6: case 144: case 145: v[i].value.ull = 0; break;
		case 29: case 30: v[i].value.ull = retiredPages(id - 29); break;
		case 38: case 45: case 52: case 59: v[i].value.ull = id / 10; break; /* NVLink error totals */
		default: v[i].nvmlReturn = E_NOT_SUPPORTED;
		}
	}
	return OK;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(void *h, nvmlUtilization_t *u) { D(h); NS(); u->gpu = idle ? 0 : 97; u->memory = idle ? 0 : 55; return OK; }
nvmlReturn_t nvmlDeviceGetPowerUsage(void *h, unsigned int *p) { D(h); NS(); *p = 300000; return OK; }
nvmlReturn_t nvmlDeviceGetTemperature(void *h, int s, unsigned int *t) { D(h); NS(); if (s) return E_INVALID; *t = 41; return OK; }
#ifndef FAKE_OLD_DRIVER
nvmlReturn_t nvmlDeviceGetTemperatureV(void *h, nvmlTemperature_t *t) { D(h); NS(); if ((t->version >> 24) != 1) return 25; t->temperature = 42; return OK; }
nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(void *h, unsigned long long *r) { D(h); NS(); *r = 0x4; return OK; }
#endif
nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(void *h, unsigned long long *r) { D(h); NS(); *r = 0x4; return OK; }
nvmlReturn_t nvmlDeviceGetClockInfo(void *h, int t, unsigned int *c) { D(h); NS(); *c = t == 2 ? 2619 : 1980; return OK; }
nvmlReturn_t nvmlDeviceGetPerformanceState(void *h, int *p) { D(h); NS(); *p = 0; return OK; }
nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(void *h, unsigned int *p) { D(h); NS(); *p = 700000; return OK; }
nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(void *h, unsigned int *g) { D(h); NS(); *g = 5; return OK; }
nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(void *h, unsigned int *w) { D(h); NS(); *w = 16; return OK; }
nvmlReturn_t nvmlDeviceGetPcieReplayCounter(void *h, unsigned int *c) { D(h); NS(); *c = 0; return OK; }
/* Aggregate corrected ECC errors are 3, as field 5 says; the rest 0. */
nvmlReturn_t nvmlDeviceGetTotalEccErrors(void *h, int e, int c, unsigned long long *n) {
	D(h); NS();
	if (getterNS("ecc")) return E_NOT_SUPPORTED;
	*n = (e == 0 && c == 1) ? 3 : 0;
	return OK;
}
nvmlReturn_t nvmlDeviceGetRemappedRows(void *h, unsigned int *c, unsigned int *u, unsigned int *p, unsigned int *f) {
	D(h); NS();
	if (getterNS("remap")) return E_NOT_SUPPORTED;
	*c = 1; *u = 0; *p = 0; *f = 0;
	return OK;
}
/* The retired pages' addresses, as many as FAKENVML_RETIRED says, with
 * NVML's sizing protocol: a list too short gets the count and
 * INSUFFICIENT_SIZE. */
nvmlReturn_t nvmlDeviceGetRetiredPages(void *h, int cause, unsigned int *count, unsigned long long *addrs) {
	D(h); NS();
	if (getterNS("retired")) return E_NOT_SUPPORTED;
	if (cause < 0 || cause > 1) return E_INVALID;
	unsigned int n = retiredPages(cause);
	if (!addrs || *count < n) { *count = n; return n ? E_INSUFFICIENT : OK; }
	for (unsigned int i = 0; i < n; i++) addrs[i] = 0x100000ull * (cause + 1) + 0x1000ull * i;
	*count = n;
	return OK;
}
/* NVLink error counter c (0 replay, 1 recovery, 2 CRC flit, 3 CRC data) of
 * link l: the field total (52, 59, 38, 45 → id / 10) spread over
 * FAKENVML_NVLINKS links; other links INVALID_ARGUMENT, the ECC counter
 * (4) NOT_SUPPORTED. */
nvmlReturn_t nvmlDeviceGetNvLinkErrorCounter(void *h, unsigned int l, int c, unsigned long long *v) {
	static const unsigned int field[4] = {52, 59, 38, 45};
	const char *s = getenv("FAKENVML_NVLINKS");
	unsigned int n = s ? (unsigned int)atoi(s) : 4;
	D(h); NS();
	if (getterNS("nvlink")) return E_NOT_SUPPORTED;
	if (l >= n) return E_INVALID;
	if (c < 0 || c > 3) return E_NOT_SUPPORTED;
	unsigned int total = field[c] / 10;
	*v = total / n + (l < total % n);
	return OK;
}

/* Dedicated getters for what the fields give, with the same values: energy
 * (mJ, the field 83 clock), the memory sensor (48 °C, field 82), the
 * perf-policy violation time of policy p (ns, 1000 × (74 + p), fields
 * 74-79) and PCIe throughput (KB/s: TX 8192, RX 4096), which takes 20 ms
 * like the real one. */
typedef struct { int controller, defaultMinTemp, defaultMaxTemp, currentTemp, target; } nvmlGpuThermalSettingsSensor_t;
typedef struct { unsigned int count; nvmlGpuThermalSettingsSensor_t sensor[3]; } nvmlGpuThermalSettings_t;
typedef struct { unsigned long long referenceTime, violationTime; } nvmlViolationTime_t;
nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(void *h, unsigned long long *e) {
	D(h); NS();
	if (getterNS("energy")) return E_NOT_SUPPORTED;
	*e = nowUS(CLOCK_REALTIME) / 1000;
	return OK;
}
nvmlReturn_t nvmlDeviceGetThermalSettings(void *h, unsigned int idx, nvmlGpuThermalSettings_t *t) {
	D(h); NS();
	if (getterNS("thermal")) return E_NOT_SUPPORTED;
	if (idx != 15) return E_INVALID; /* NVML_THERMAL_TARGET_ALL */
	memset(t, 0, sizeof *t);
	t->count = 2;
	t->sensor[0].target = 1; t->sensor[0].currentTemp = 42; /* GPU */
	t->sensor[1].target = 2; t->sensor[1].currentTemp = 48; /* memory */
	return OK;
}
nvmlReturn_t nvmlDeviceGetViolationStatus(void *h, int policy, nvmlViolationTime_t *v) {
	D(h); NS();
	if (getterNS("violation") || policy < 0 || policy > 5) return E_NOT_SUPPORTED;
	v->referenceTime = nowUS(CLOCK_REALTIME);
	v->violationTime = 1000ull * (74 + policy);
	return OK;
}
nvmlReturn_t nvmlDeviceGetPcieThroughput(void *h, int counter, unsigned int *kbps) {
	D(h); NS();
	if (getterNS("pcie")) return E_NOT_SUPPORTED;
	if (counter < 0 || counter > 1) return E_INVALID;
	usleep(20000);
	*kbps = counter == 0 ? 8192 : 4096;
	return OK;
}

/* Modes: FAKENVML_PERSISTENCE, FAKENVML_ECC and FAKENVML_MIG_MODE are 0
 * (disabled), 1 (enabled) or "ns" (not supported); defaults 1, 1, 0. MIG
 * mode alone does not make MIG instances (the other MIG symbols are absent). */
static nvmlReturn_t fakeMode(const char *env, int def, unsigned int *v) {
	const char *s = getenv(env);
	if (s && !strcmp(s, "ns")) return E_NOT_SUPPORTED;
	*v = s ? (unsigned int)atoi(s) : (unsigned int)def;
	return OK;
}
nvmlReturn_t nvmlDeviceGetPersistenceMode(void *h, unsigned int *m) { D(h); return fakeMode("FAKENVML_PERSISTENCE", 1, m); }
nvmlReturn_t nvmlDeviceGetDisplayMode(void *h, unsigned int *m) { D(h); NS(); return fakeMode("FAKENVML_DISPLAY_MODE", 0, m); }
nvmlReturn_t nvmlDeviceGetDisplayActive(void *h, unsigned int *m) { D(h); NS(); return fakeMode("FAKENVML_DISPLAY_ACTIVE", 0, m); }
nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(void *h, unsigned int *m) {
	D(h); NS();
	const char *s = getenv("FAKENVML_RETIRED_PENDING");
	if (!s) return E_NOT_SUPPORTED;
	return fakeMode("FAKENVML_RETIRED_PENDING", 0, m);
}
nvmlReturn_t nvmlDeviceGetFanSpeed(void *h, unsigned int *f) {
	D(h); NS();
	const char *s = getenv("FAKENVML_FAN");
	if (!s) return E_NOT_SUPPORTED;
	return fakeMode("FAKENVML_FAN", 0, f);
}
/* fakeList parses env's comma-separated numbers into v[0..n-1] (missing
 * ones 0; default all 0); "ns" is NOT_SUPPORTED. */
static nvmlReturn_t fakeList(const char *env, unsigned int *v, int n) {
	const char *s = getenv(env);
	for (int i = 0; i < n; i++) v[i] = 0;
	if (!s) return OK;
	if (!strcmp(s, "ns")) return E_NOT_SUPPORTED;
	for (int i = 0; i < n && *s; i++) {
		v[i] = (unsigned int)strtoul(s, (char **)&s, 10);
		if (*s == ',') s++;
	}
	return OK;
}
nvmlReturn_t nvmlDeviceGetEncoderStats(void *h, unsigned int *n, unsigned int *fps, unsigned int *lat) {
	unsigned int v[3];
	D(h); NS();
	nvmlReturn_t r = fakeList("FAKENVML_ENCODER_STATS", v, 3);
	if (r == OK) { *n = v[0]; *fps = v[1]; *lat = v[2]; }
	return r;
}
typedef struct { unsigned int sessionsCount, averageFPS, averageLatency; } nvmlFBCStats_t;
nvmlReturn_t nvmlDeviceGetFBCStats(void *h, nvmlFBCStats_t *st) {
	unsigned int v[3];
	D(h); NS();
	nvmlReturn_t r = fakeList("FAKENVML_FBC_STATS", v, 3);
	if (r == OK) { st->sessionsCount = v[0]; st->averageFPS = v[1]; st->averageLatency = v[2]; }
	return r;
}
static nvmlReturn_t mediaUtil(void *h, int i, unsigned int *u, unsigned int *period) {
	unsigned int v[4];
	D(h); NS();
	nvmlReturn_t r = fakeList("FAKENVML_MEDIA_UTIL", v, 4);
	if (r == OK) { *u = v[i]; *period = 166667; }
	return r;
}
nvmlReturn_t nvmlDeviceGetEncoderUtilization(void *h, unsigned int *u, unsigned int *p) { return mediaUtil(h, 0, u, p); }
nvmlReturn_t nvmlDeviceGetDecoderUtilization(void *h, unsigned int *u, unsigned int *p) { return mediaUtil(h, 1, u, p); }
nvmlReturn_t nvmlDeviceGetJpgUtilization(void *h, unsigned int *u, unsigned int *p) { return mediaUtil(h, 2, u, p); }
nvmlReturn_t nvmlDeviceGetOfaUtilization(void *h, unsigned int *u, unsigned int *p) { return mediaUtil(h, 3, u, p); }
nvmlReturn_t nvmlDeviceGetEccMode(void *h, unsigned int *cur, unsigned int *pending) {
	D(h);
	nvmlReturn_t r = fakeMode("FAKENVML_ECC", 1, cur);
	if (r == OK) *pending = *cur;
	return r;
}
nvmlReturn_t nvmlDeviceGetMigMode(void *h, unsigned int *cur, unsigned int *pending) {
	D(h);
	nvmlReturn_t r = fakeMode("FAKENVML_MIG_MODE", 0, cur);
	if (r == OK) *pending = *cur;
	return r;
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, void **h) {
	countCall(__func__);
	if (!initialized) return E_UNINIT;
	for (int i = 0; i < ndev; i++) {
		char want[64];
		snprintf(want, sizeof want, "GPU-fake-0000-%04d", i);
		if (strcmp(uuid, want)) continue;
		if (ctlFile("lost", i)) return E_GPU_LOST;
		*h = &devs[i];
		__atomic_add_fetch(&devs[i].calls, 1, __ATOMIC_RELAXED);
		return OK;
	}
	return E_NOT_FOUND;
}

/* Events: one set registers a mask per device; Wait delivers an XID that a
 * test dropped into the control directory, once. */
typedef struct { void *device; unsigned long long eventType, eventData; unsigned int gpuInstanceId, computeInstanceId; } nvmlEventData_t;
struct fakeset { unsigned long long mask[MAXDEV]; };
#define EV_SBE 1ull
#define EV_DBE 2ull
#define EV_XID 8ull
#define EV_CLOCK 16ull
#define EV_POWER_SOURCE 128ull

nvmlReturn_t nvmlEventSetCreate(struct fakeset **set) {
	countCall(__func__);
	if (!initialized) return E_UNINIT;
	*set = calloc(1, sizeof **set);
	return OK;
}
nvmlReturn_t nvmlEventSetFree(struct fakeset *set) { free(set); return OK; }
nvmlReturn_t nvmlDeviceGetSupportedEventTypes(void *h, unsigned long long *types) {
	const char *e = getenv("FAKENVML_EVENTS");
	D(h);
	NS();
	if (e && !strcmp(e, "ns")) return E_NOT_SUPPORTED;
	*types = EV_SBE | EV_DBE | EV_XID | EV_POWER_SOURCE;
	return OK;
}
nvmlReturn_t nvmlDeviceRegisterEvents(void *h, unsigned long long types, struct fakeset *set) {
	struct fakedev *d = D(h);
	NS();
	if (types & ~(EV_SBE | EV_DBE | EV_XID | EV_POWER_SOURCE)) return E_NOT_SUPPORTED;
	set->mask[d->index] |= types;
	return OK;
}
/* A timeout of 0 waits until an event arrives, however long: NVIDIA's
 * Python bindings document it so ("0 means to wait indefinitely") and a
 * real driver blocks there; it is not a non-blocking poll. */
nvmlReturn_t nvmlEventSetWait_v2(struct fakeset *set, nvmlEventData_t *data, unsigned int timeoutms) {
	countCall(__func__);
	if (!initialized) return E_UNINIT;
	if (timeoutms == 0 && !ctl) for (;;) pause(); /* nothing can ever arrive */
	for (unsigned int waited = 0;; waited++) {
		for (int i = 0; i < ndev; i++) {
			if (!(set->mask[i] & EV_XID)) continue;
			char path[512];
			if (!ctl) continue;
			snprintf(path, sizeof path, "%s/xid%d", ctl, i);
			FILE *f = fopen(path, "r");
			if (!f) continue;
			unsigned long long code = 0;
			int ok = fscanf(f, "%llu", &code) == 1;
			fclose(f);
			unlink(path);
			if (!ok) continue;
			memset(data, 0, sizeof *data);
			data->device = &devs[i];
			data->eventType = EV_XID;
			data->eventData = code;
			return OK;
		}
		if (timeoutms && waited >= timeoutms) return E_TIMEOUT;
		if (!ctl) {
			/* nothing can ever be injected: block like the real driver */
			usleep(timeoutms * 1000u);
			return E_TIMEOUT;
		}
		/* poll the control directory every 10 ms: a real driver blocks in
		 * the kernel, so the fake must not spend the CPU that the
		 * benchmarks attribute to gpusampler */
		usleep(10000);
		waited += 9;
	}
}

/* GPM: a sample records its device and time; nvmlGpmMetricsGet answers
 * fixed values per metric id (percent, or MiB/s for link rates) when the
 * two samples are of one device and 100 ms or more apart. */
typedef struct { unsigned int version, isSupportedDevice; } nvmlGpmSupport_t;
struct fakegpm { struct fakedev *dev; unsigned long long us; };
typedef struct {
	unsigned int metricId;
	nvmlReturn_t nvmlReturn;
	double value;
	struct { char *shortName, *longName, *unit; } metricInfo;
} nvmlGpmMetric_t;
typedef struct {
	unsigned int version, numMetrics;
	struct fakegpm *sample1, *sample2;
	nvmlGpmMetric_t metrics[];
} nvmlGpmMetricsGet_t;

nvmlReturn_t nvmlGpmQueryDeviceSupport(void *h, nvmlGpmSupport_t *s) {
	D(h);
	NS();
	const char *e = getenv("FAKENVML_NO_GPM");
	if (s->version != 1) return 25; /* ARGUMENT_VERSION_MISMATCH */
	s->isSupportedDevice = !(e && atoi(e));
	return OK;
}
nvmlReturn_t nvmlGpmSampleAlloc(struct fakegpm **s) {
	if (!initialized) return E_UNINIT;
	*s = calloc(1, sizeof **s);
	return OK;
}
nvmlReturn_t nvmlGpmSampleFree(struct fakegpm *s) { free(s); return OK; }
nvmlReturn_t nvmlGpmSampleGet(void *h, struct fakegpm *s) {
	struct fakedev *d = D(h);
	NS();
	s->dev = d;
	s->us = nowUS(CLOCK_MONOTONIC);
	return OK;
}
nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *m) {
	countCall(__func__);
	if (!initialized) return E_UNINIT;
	if (m->version != 1) return 25;
	if (!m->sample1 || !m->sample2 || !m->sample1->dev || m->sample1->dev != m->sample2->dev) return E_INVALID;
	__atomic_add_fetch(&m->sample1->dev->calls, 1, __ATOMIC_RELAXED); /* a call on the device's behalf */
	if (m->sample2->us < m->sample1->us + 100000) {
		fprintf(stderr, "fakenvml: GPM samples %llu us apart (< 100 ms)\n", m->sample2->us - m->sample1->us);
		abort();
	}
	for (unsigned int i = 0; i < m->numMetrics; i++) {
		nvmlGpmMetric_t *g = &m->metrics[i];
		g->nvmlReturn = OK;
		switch (g->metricId) {
		case 1: g->value = 97.5; break;   /* graphics */
		case 2: g->value = 62.5; break;   /* SM active */
		case 3: g->value = 40; break;     /* occupancy */
		case 5: g->value = 55; break;     /* any tensor */
		case 6: g->value = 0; break;
		case 7: g->value = 50; break;
		case 9: g->value = 1; break;
		case 10: g->value = 33; break;    /* DRAM */
		case 11: g->value = 0.5; break;
		case 12: g->value = 20; break;
		case 13: g->value = 30; break;
		case 20: g->value = 1024; break;  /* PCIe TX MiB/s */
		case 21: g->value = 512; break;
		case 60: g->value = 2048; break;  /* NVLink RX MiB/s */
		case 61: g->value = 4096; break;
		default: g->nvmlReturn = E_NOT_SUPPORTED;
		}
	}
	return OK;
}

/*
 * Processes:
 *   FAKENVML_PROCS      comma-separated PIDs running on every device
 *                       (default none); process i holds (i+1) GiB as a
 *                       compute process, process 1 is also a graphics
 *                       process (512 MiB more: "C+G")
 *   FAKENVML_PROC_NS    "util": nvmlDeviceGetProcessUtilization answers
 *                       NOT_SUPPORTED (like a MIG instance); "all": the
 *                       running-process lists too
 * Per-process utilization samples are taken every FAKE_PROC_PERIOD_US for
 * every process; the driver keeps the last FAKE_PROC_DEPTH. Sample k of
 * process i has sm (k*7+i)%101, mem k%50, enc i, dec 1.
 * nvmlSystemGetProcessName answers "fake-<pid>", except for the calling
 * process itself (NOT_FOUND, so that callers fall back to /proc).
 */
#define FAKE_PROC_PERIOD_US 50000ull
#define FAKE_PROC_DEPTH 10ull
typedef struct { unsigned int pid; unsigned long long usedGpuMemory; unsigned int gpuInstanceId, computeInstanceId; } nvmlProcessInfo_t;
typedef struct { unsigned int pid; unsigned long long timeStamp; unsigned int smUtil, memUtil, encUtil, decUtil; } nvmlProcessUtilizationSample_t;

static unsigned int procs[32];
static int nprocs = -1;

static void loadProcs(void) {
	const char *s = getenv("FAKENVML_PROCS");
	char buf[512], *tok, *save;
	if (nprocs >= 0) return;
	nprocs = 0;
	if (!s) return;
	snprintf(buf, sizeof buf, "%s", s);
	for (tok = strtok_r(buf, ",", &save); tok && nprocs < 32; tok = strtok_r(0, ",", &save))
		procs[nprocs++] = strtoul(tok, 0, 10);
}

static int procNS(const char *what) {
	const char *s = getenv("FAKENVML_PROC_NS");
	return s && (!strcmp(s, "all") || !strcmp(s, what));
}

static nvmlReturn_t runningProcs(int graphics, unsigned int *count, nvmlProcessInfo_t *infos) {
	unsigned int n = 0;
	loadProcs();
	if (procNS("all")) return E_NOT_SUPPORTED;
	for (int i = 0; i < nprocs; i++) {
		if (graphics && i != 1) continue;
		if (infos && n < *count) {
			infos[n].pid = procs[i];
			infos[n].usedGpuMemory = graphics ? 512ull << 20 : (unsigned long long)(i + 1) << 30;
			infos[n].gpuInstanceId = infos[n].computeInstanceId = 0xFFFFFFFF;
		}
		n++;
	}
	if (!infos || n > *count) { *count = n; return n ? E_INSUFFICIENT : OK; }
	*count = n;
	return OK;
}
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(void *h, unsigned int *count, nvmlProcessInfo_t *infos) {
	D(h);
	return runningProcs(0, count, infos);
}
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(void *h, unsigned int *count, nvmlProcessInfo_t *infos) {
	D(h);
	return runningProcs(1, count, infos);
}
nvmlReturn_t nvmlDeviceGetProcessUtilization(void *h, nvmlProcessUtilizationSample_t *u, unsigned int *count, unsigned long long last) {
	D(h);
	loadProcs();
	if (procNS("util")) return E_NOT_SUPPORTED;
	unsigned long long newest = nowUS(clk) / FAKE_PROC_PERIOD_US, k0 = newest >= FAKE_PROC_DEPTH ? newest - FAKE_PROC_DEPTH + 1 : 0;
	unsigned int n = 0;
	for (unsigned long long k = k0; k <= newest; k++) {
		if (k * FAKE_PROC_PERIOD_US <= last) continue;
		for (int i = 0; i < nprocs; i++) {
			if (u && n < *count) {
				u[n].pid = procs[i];
				u[n].timeStamp = k * FAKE_PROC_PERIOD_US;
				u[n].smUtil = (k * 7 + i) % 101;
				u[n].memUtil = k % 50;
				u[n].encUtil = i;
				u[n].decUtil = 1;
			}
			n++;
		}
	}
	if (!n) return E_NOT_FOUND;
	if (!u || n > *count) { *count = n; return E_INSUFFICIENT; }
	*count = n;
	return OK;
}
nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char *name, unsigned int n) {
	countCall(__func__);
	if (!initialized) return E_UNINIT;
	if (pid == (unsigned int)getpid()) return E_NOT_FOUND;
	snprintf(name, n, "fake-%u", pid);
	return OK;
}
