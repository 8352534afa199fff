// host_meeting: the GPU's side of a meeting with a host thread in the middle of a stream
// (internal to src/backend/cuda/; used by cuda_cpu_experts.c), without events, host
// callbacks or copies the host must wait for.
//
// The protocol, each side's steps and the numbering are the contract above
// ft_cuda_meeting_export. Launches on the caller's stream only; no state of its own.
#ifndef FT_CUDA_HOST_MEETING_H
#define FT_CUDA_HOST_MEETING_H

#include "ft_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { FT_CUDA_MEETING_MAX_PIECES = 3 };
typedef struct ft_cuda_meeting_piece {
    const void *src; // device memory
    void *dst;       // the mapped host buffer (the device's address)
    size_t n;        // 32-bit words
} ft_cuda_meeting_piece;

// Both directions go through mapped pinned host memory (ft_cuda_host_alloc_mapped) and a
// 32-bit sequence number, counted on the device (*seq, device memory: one per meeting):
//   - export: a kernel copies up to FT_CUDA_MEETING_MAX_PIECES pieces of 32-bit words (the
//     layer's input, and the routing where the GPU routes) from device memory into host
//     buffers, fences them to the system, and its last CTA advances *seq and writes it to
//     *flag; a host thread
//     spinning on the flag (an acquire load) until it reaches the meeting's number (the host
//     counts its meetings the same way) then reads the buffer;
//   - import: the stream waits until the second flag reaches the meeting's number (the host
//     writes the buffer, then the flag with a release store), then a kernel copies the n floats
//     from the host buffer into device memory, bypassing the GPU's caches (the buffer is
//     reused, so a cached line would be stale). The wait is the driver's stream memory
//     operation (cuStreamWaitValue32: the GPU's front end polls, no SM is held) where the
//     driver gives it and the caller knows the number (stream_wait, wait_seq), else the copy
//     kernel's CTAs spin on the flag themselves, reading the number from *seq: then the same
//     launches serve every replay of a CUDA graph.
// The stream waits for the host there, so the host may enqueue the rest of the step (or launch
// a graph of it) before it has computed anything. Numbers compare modulo 2^32.
//
// Every pointer is the device's address (for host buffers: the mapped address); counter is
// device memory holding 0, used by export to find its last CTA (left at 0 again).
void ft_cuda_meeting_export(const ft_cuda_meeting_piece *pieces, int n_pieces, uint32_t *flag, uint32_t *seq,
                            uint32_t *counter, ft_cuda_stream *s);
void ft_cuda_meeting_import(const float *y_host, float *y, size_t n, const uint32_t *flag, const uint32_t *seq,
                            bool stream_wait, uint32_t wait_seq, ft_cuda_stream *s);

// The join of --moe-backend hybrid: where *count (device memory, written earlier on the stream)
// is not 0, waits for the second flag to reach *seq (a spinning kernel, so graph replays work)
// and adds the host's n floats to y; where it is 0, does nothing (the host does not answer a
// meeting it has no work for).
void ft_cuda_meeting_import_add(const float *y_host, float *y, size_t n, const uint32_t *flag, const uint32_t *seq,
                                const int32_t *count, ft_cuda_stream *s);

// Does the driver give the stream wait (cuStreamWaitValue32)?
bool ft_cuda_meeting_stream_wait_available(void);

#ifdef __cplusplus
}
#endif

#endif
