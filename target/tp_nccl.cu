/* Tensor parallelism's collectives on the GPU through NCCL (DESIGN.md section 10), for the CUDA
 * forward: a communicator per rank, the all-gathers of the row-parallel partial sums (added in a
 * fixed order by the forward, so results do not depend on NCCL's reduction order) and of the
 * vocabulary-parallel LM head, enqueued on the forward's stream (so they are
 * captured into its graphs like any kernel), and a wait that never hangs: it polls the stream and
 * NCCL's asynchronous error state and aborts the communicator on an error or a timeout, so a dead
 * or stuck rank stops the engine with a message.
 *
 * NCCL is loaded at run time (dlopen of libnccl.so.2) instead of linked: the binary then runs, and
 * serves without tensor parallelism, on machines without NCCL, and a missing library is a clear
 * error at start-up. The few types and constants used are NCCL's stable C ABI (nccl.h 2.x).
 * NVLink multicast (NVLS) is switched off before the first communicator is made: on the shared
 * machines it can put the host's GPUs out of service (NCCL_NVLS_ENABLE=0, unless already set). */
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include "target/target_internal.h"

typedef struct nccl_comm_s *nccl_comm_t; /* ncclComm_t */
typedef struct {
    char internal[128];
} nccl_unique_id; /* ncclUniqueId */
enum { NCCL_SUCCESS = 0, NCCL_IN_PROGRESS = 7, NCCL_FLOAT32 = 7, NCCL_SUM = 0 };

static struct {
    pthread_once_t once;
    void *lib;
    char why[256];
    int (*get_unique_id)(nccl_unique_id *);
    int (*comm_init_rank)(nccl_comm_t *, int, nccl_unique_id, int);
    int (*comm_init_all)(nccl_comm_t *, int, const int *);
    int (*comm_destroy)(nccl_comm_t);
    int (*comm_abort)(nccl_comm_t);
    int (*comm_get_async_error)(nccl_comm_t, int *);
    const char *(*get_error_string)(int);
    int (*all_reduce)(const void *, void *, size_t, int, int, nccl_comm_t, cudaStream_t);
    int (*all_gather)(const void *, void *, size_t, int, nccl_comm_t, cudaStream_t);
    int (*group_start)(void);
    int (*group_end)(void);
} nccl = {PTHREAD_ONCE_INIT};

struct flint_tp_nccl {
    nccl_comm_t comm;
    int rank, n_ranks, device;
    int failed; /* aborted: every later call fails at once */
};

static void load_nccl(void) {
    setenv("NCCL_NVLS_ENABLE", "0", 0);
    /* every connection at init: NCCL's lazy setup at a first collective cannot run inside the
     * stream capture where flint's first forward of a shape happens */
    setenv("NCCL_RUNTIME_CONNECT", "0", 0);
    const char *names[] = {"libnccl.so.2", "libnccl.so"};
    for (int i = 0; i < 2 && !nccl.lib; i++) nccl.lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!nccl.lib) {
        snprintf(nccl.why, sizeof nccl.why, "cannot load NCCL (libnccl.so.2): %s", dlerror());
        return;
    }
#define SYM(field, name)                                                                                   \
    do {                                                                                                   \
        *(void **)&nccl.field = dlsym(nccl.lib, name);                                                     \
        if (!nccl.field) {                                                                                 \
            snprintf(nccl.why, sizeof nccl.why, "NCCL has no %s", name);                                   \
            nccl.lib = NULL;                                                                               \
            return;                                                                                        \
        }                                                                                                  \
    } while (0)
    SYM(get_unique_id, "ncclGetUniqueId");
    SYM(comm_init_rank, "ncclCommInitRank");
    SYM(comm_init_all, "ncclCommInitAll");
    SYM(comm_destroy, "ncclCommDestroy");
    SYM(comm_abort, "ncclCommAbort");
    SYM(comm_get_async_error, "ncclCommGetAsyncError");
    SYM(get_error_string, "ncclGetErrorString");
    SYM(all_reduce, "ncclAllReduce");
    SYM(all_gather, "ncclAllGather");
    SYM(group_start, "ncclGroupStart");
    SYM(group_end, "ncclGroupEnd");
#undef SYM
}

static int nccl_ready(flint_err *err) {
    pthread_once(&nccl.once, load_nccl);
    if (!nccl.lib) return flint_err_set(err, FLINT_ERR_UNSUPPORTED, "tensor parallel: %s", nccl.why);
    return 0;
}

static const char *nccl_str(int r) { return nccl.get_error_string ? nccl.get_error_string(r) : "unknown"; }

static void fill_comm(flint_tp_comm *c, flint_tp_nccl *n) {
    memset(c, 0, sizeof *c);
    c->rank = n->rank;
    c->n_ranks = n->n_ranks;
    c->device = n->device;
    c->nccl = n;
}

int flint_tp_nccl_open_all(int n, const int *devices, flint_tp_comm *comms, flint_err *err) {
    if (nccl_ready(err)) return -1;
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess) n_dev = 0;
    if (n < 1 || n > 64)
        return flint_err_set(err, FLINT_ERR_INVALID, "tensor parallel size %d is outside 1..64", n);
    for (int r = 0; r < n; r++)
        if (devices[r] < 0 || devices[r] >= n_dev)
            return flint_err_set(err, FLINT_ERR_INVALID, "tensor parallel size %d needs CUDA device %d, but %d %s "
                                 "present", n, devices[r], n_dev, n_dev == 1 ? "is" : "are");
    nccl_comm_t *cs = (nccl_comm_t *)flint_xcalloc((size_t)n, sizeof *cs);
    int rc = nccl.comm_init_all(cs, n, devices);
    if (rc != NCCL_SUCCESS) {
        free(cs);
        return flint_err_set(err, FLINT_ERR_IO, "tensor parallel: ncclCommInitAll over %d GPUs: %s", n, nccl_str(rc));
    }
    for (int r = 0; r < n; r++) {
        flint_tp_nccl *p = (flint_tp_nccl *)flint_xcalloc(1, sizeof *p);
        p->comm = cs[r], p->rank = r, p->n_ranks = n, p->device = devices[r];
        fill_comm(&comms[r], p);
    }
    free(cs);
    /* one collective of each kind before any capture (NCCL sets up buffers at first use) */
    float *buf[64] = {NULL};
    cudaStream_t st[64] = {NULL};
    int ok = 1;
    for (int r = 0; r < n && ok; r++)
        ok = cudaSetDevice(devices[r]) == cudaSuccess && cudaMalloc((void **)&buf[r], sizeof(float) * 4096 * (n + 1)) ==
             cudaSuccess && cudaStreamCreateWithFlags(&st[r], cudaStreamNonBlocking) == cudaSuccess &&
             cudaMemset(buf[r], 0, sizeof(float) * 4096 * (n + 1)) == cudaSuccess;
    for (int k = 0; k < 2 && ok; k++) {
        nccl.group_start();
        for (int r = 0; r < n; r++) {
            cudaSetDevice(devices[r]);
            if (k == 0) nccl.all_reduce(buf[r], buf[r], 4096, NCCL_FLOAT32, NCCL_SUM, comms[r].nccl->comm, st[r]);
            else nccl.all_gather(buf[r], buf[r] + 4096, 4096, NCCL_FLOAT32, comms[r].nccl->comm, st[r]);
        }
        ok = nccl.group_end() == NCCL_SUCCESS;
    }
    for (int r = 0; r < n; r++) {
        cudaSetDevice(devices[r]);
        if (st[r] && cudaStreamSynchronize(st[r]) != cudaSuccess) ok = 0;
        if (st[r]) cudaStreamDestroy(st[r]);
        if (buf[r]) cudaFree(buf[r]);
    }
    if (!ok) {
        for (int r = 0; r < n; r++) flint_tp_nccl_close(&comms[r]);
        return flint_err_set(err, FLINT_ERR_IO, "tensor parallel: the first all-reduce over %d GPUs failed", n);
    }
    flint_log_info("tensor parallel: %d ranks through NCCL (NVLink multicast off)", n);
    return 0;
}

int flint_tp_nccl_unique_id(unsigned char id[128], flint_err *err) {
    if (nccl_ready(err)) return -1;
    nccl_unique_id u;
    int rc = nccl.get_unique_id(&u);
    if (rc != NCCL_SUCCESS) return flint_err_set(err, FLINT_ERR_IO, "tensor parallel: ncclGetUniqueId: %s", nccl_str(rc));
    memcpy(id, u.internal, 128);
    return 0;
}

int flint_tp_nccl_open_rank(int n, int rank, int device, const unsigned char id[128], flint_tp_comm *comm,
                            flint_err *err) {
    if (nccl_ready(err)) return -1;
    if (n < 1 || rank < 0 || rank >= n)
        return flint_err_set(err, FLINT_ERR_INVALID, "tensor parallel: rank %d of %d", rank, n);
    if (cudaSetDevice(device) != cudaSuccess)
        return flint_err_set(err, FLINT_ERR_INVALID, "tensor parallel: rank %d: no CUDA device %d", rank, device);
    nccl_unique_id u;
    memcpy(u.internal, id, 128);
    nccl_comm_t c = NULL;
    int rc = nccl.comm_init_rank(&c, n, u, rank);
    if (rc != NCCL_SUCCESS)
        return flint_err_set(err, FLINT_ERR_IO, "tensor parallel: rank %d of %d: ncclCommInitRank: %s", rank, n,
                             nccl_str(rc));
    flint_tp_nccl *p = (flint_tp_nccl *)flint_xcalloc(1, sizeof *p);
    p->comm = c, p->rank = rank, p->n_ranks = n, p->device = device;
    fill_comm(comm, p);
    /* one collective of each kind before any capture, as open_all (every rank does this at once) */
    float *buf = NULL;
    cudaStream_t st = NULL;
    int ok = cudaMalloc((void **)&buf, sizeof(float) * 4096 * (n + 1)) == cudaSuccess &&
             cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) == cudaSuccess &&
             cudaMemset(buf, 0, sizeof(float) * 4096 * (n + 1)) == cudaSuccess &&
             nccl.all_reduce(buf, buf, 4096, NCCL_FLOAT32, NCCL_SUM, c, st) == NCCL_SUCCESS &&
             nccl.all_gather(buf, buf + 4096, 4096, NCCL_FLOAT32, c, st) == NCCL_SUCCESS;
    if (st) {
        flint_err werr;
        memset(&werr, 0, sizeof werr);
        if (ok && flint_tp_nccl_wait(p, st, 120.0, &werr)) ok = 0;
        cudaStreamDestroy(st);
    }
    if (buf) cudaFree(buf);
    if (!ok) {
        flint_tp_nccl_close(comm);
        return flint_err_set(err, FLINT_ERR_IO, "tensor parallel: rank %d of %d: the first collective failed", rank, n);
    }
    return 0;
}

void flint_tp_nccl_close(flint_tp_comm *comm) {
    flint_tp_nccl *p = comm ? comm->nccl : NULL;
    if (!p) return;
    cudaSetDevice(p->device);
    if (p->comm) {
        if (p->failed) nccl.comm_abort(p->comm);
        else nccl.comm_destroy(p->comm);
    }
    free(p);
    comm->nccl = NULL;
}

int flint_tp_nccl_failed(const flint_tp_nccl *p) { return p->failed; }

void flint_tp_nccl_abort(flint_tp_comm *comm) {
    flint_tp_nccl *p = comm ? comm->nccl : NULL;
    if (!p) return;
    p->failed = 1;
    flint_tp_nccl_close(comm);
}

int flint_tp_nccl_all_gather(flint_tp_nccl *p, const float *local, float *all, size_t n_local, void *stream,
                             flint_err *err) {
    if (p->failed) return flint_err_set(err, FLINT_ERR_IO, "tensor parallel: rank %d: the group has failed", p->rank);
    int rc = nccl.all_gather(local, all, n_local, NCCL_FLOAT32, p->comm, (cudaStream_t)stream);
    if (rc != NCCL_SUCCESS && rc != NCCL_IN_PROGRESS)
        return flint_err_set(err, FLINT_ERR_IO, "tensor parallel: rank %d: ncclAllGather: %s", p->rank, nccl_str(rc));
    return 0;
}

/* Wait for the stream without trusting it to finish: a peer that died leaves NCCL's kernels
 * spinning forever, so poll, check NCCL's error state, and give up after timeout_s. */
int flint_tp_nccl_wait(flint_tp_nccl *p, void *stream, double timeout_s, flint_err *err) {
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long spin = 0;; spin++) {
        cudaError_t q = cudaStreamQuery((cudaStream_t)stream);
        if (q == cudaSuccess) return 0;
        if (q != cudaErrorNotReady)
            return flint_err_set(err, FLINT_ERR_IO, "tensor parallel: rank %d: %s", p->rank, cudaGetErrorString(q));
        int async = NCCL_SUCCESS;
        int rc = nccl.comm_get_async_error(p->comm, &async);
        clock_gettime(CLOCK_MONOTONIC, &now);
        double dt = (double)(now.tv_sec - t0.tv_sec) + 1e-9 * (double)(now.tv_nsec - t0.tv_nsec);
        if (rc != NCCL_SUCCESS || (async != NCCL_SUCCESS && async != NCCL_IN_PROGRESS) || dt > timeout_s) {
            p->failed = 1;
            nccl.comm_abort(p->comm);
            p->comm = NULL;
            if (dt > timeout_s)
                return flint_err_set(err, FLINT_ERR_IO, "tensor parallel: rank %d: a step did not finish in %.0f s (a "
                                     "rank stopped or hangs); the NCCL group was aborted", p->rank, timeout_s);
            return flint_err_set(err, FLINT_ERR_IO, "tensor parallel: rank %d: NCCL reported %s; the group was "
                                 "aborted", p->rank, nccl_str(rc != NCCL_SUCCESS ? rc : async));
        }
        if (spin > 1000) { /* past the first ~ms, poll gently */
            struct timespec ts = {0, 50000};
            nanosleep(&ts, NULL);
        }
    }
}
