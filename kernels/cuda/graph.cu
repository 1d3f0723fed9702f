/* kernels/cuda/graph.cu: recording operations as CUDA graphs, and uploads
 * through pinned staging buffers.
 *
 * Recording captures the backend's stream (thread-local capture: calls of
 * other threads are not affected) into a graph that replay launches as one
 * unit: a decode step's ~500 kernels cost one launch instead of ~500, and
 * no kernel waits for the host to issue it. A failure while recording (a
 * launch or cuBLAS call that capture refuses, scratch that would have to
 * grow) spoils the recording, not the device: record_end then returns NULL
 * and the caller issues the operations again, unrecorded, where a real
 * failure shows. A recording holds the scratch's address; it goes stale when
 * the scratch moves (epoch), and replay says so. Recording is on by default;
 * PAGECHAT_CUDA_GRAPH=0 turns it off (backend.cu).
 *
 * Uploads: host bytes are copied into one of two pinned buffers and sent
 * from there asynchronously, so a large upload (a model's weights) reads the
 * next chunk from the host while the last one travels, and a small one (a
 * batch's rows, every step) does not wait for the device. A buffer is
 * refilled only after its last copy finished (an event each). Without pinned
 * memory an upload is a plain copy from pageable memory. */
#include "kernels/cuda/cuda_int.cuh"

#include <stdlib.h>
#include <string.h>

#define STAGE_BYTES ((size_t)32 << 20)

struct kern_graph {
	cudaGraphExec_t exec;    /* owned */
	unsigned epoch;          /* the scratch's epoch when recorded */
};

static struct {
	bool enabled;            /* unless PAGECHAT_CUDA_GRAPH=0 */
	bool recording, spoiled;
	unsigned epoch;          /* bumped when the scratch moves */
	bool stage_tried;
	uint8_t *stage[2];       /* owned, pinned host; NULL without */
	cudaEvent_t sent[2];     /* owned; the last copy out of stage[i] */
	int next;
} G;

void cu_graph_init(bool enabled)
{
	G.enabled = enabled;
}

bool cu_recording(void)
{
	return G.recording;
}

void cu_scratch_moved(void)
{
	G.epoch++;
}

/* cu_fail while recording lands here: the recording fails, the device has not. */
void cu_record_spoil(void)
{
	G.spoiled = true;
}

bool cu_record_begin(void)
{
	if (!G.enabled || G.recording || cu_failed())
		return false;
	if (cudaStreamBeginCapture(cu_stream(), cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
		(void)cudaGetLastError();
		return false;
	}
	G.recording = true;
	G.spoiled = false;
	cu_act_forget();
	return true;
}

kern_graph *cu_record_end(void)
{
	assert(G.recording);
	cudaGraph_t graph = NULL;
	cudaError_t r = cudaStreamEndCapture(cu_stream(), &graph);
	G.recording = false;
	cu_act_forget();
	kern_graph *g = NULL;
	cudaGraphExec_t exec;
	if (r == cudaSuccess && graph && !G.spoiled && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess) {
		g = (kern_graph *)xmalloc(sizeof *g);
		g->exec = exec;
		g->epoch = G.epoch;
	}
	if (graph)
		(void)cudaGraphDestroy(graph);
	(void)cudaGetLastError(); /* what capture refused is not the device's failure */
	return g;
}

int cu_replay(kern_graph *g)
{
	if (g->epoch != G.epoch)
		return -1;
	cu_act_forget(); /* its kernels rewrite the quantized activations */
	if (!cu_failed())
		cu_ok(cudaGraphLaunch(g->exec, cu_stream()), "cudaGraphLaunch");
	return 0;
}

void cu_graph_free(kern_graph *g)
{
	if (!g)
		return;
	(void)cudaGraphExecDestroy(g->exec);
	free(g);
}

/* ---- uploads ---- */

/* The two pinned buffers and their events, made on first use; false when
 * there is no pinned memory (uploads then copy from pageable memory). */
static bool stage_ready(void)
{
	if (G.stage_tried)
		return G.stage[1] != NULL;
	G.stage_tried = true;
	bool ok = true;
	for (int i = 0; i < 2 && ok; i++)
		ok = cudaHostAlloc((void **)&G.stage[i], STAGE_BYTES, cudaHostAllocDefault) == cudaSuccess &&
		     cudaEventCreateWithFlags(&G.sent[i], cudaEventDisableTiming) == cudaSuccess;
	if (!ok) {
		(void)cudaGetLastError(); /* no pinned memory is an answer, not a failure */
		for (int i = 0; i < 2; i++) {
			if (G.stage[i])
				(void)cudaFreeHost(G.stage[i]);
			G.stage[i] = NULL;
		}
	}
	return ok;
}

void cu_upload(void *dst, const void *src, size_t bytes)
{
	assert(!G.recording);
	cu_act_touch(dst, bytes);
	if (cu_failed() || bytes == 0)
		return;
	if (!stage_ready()) {
		/* returns once src has been read (the driver stages it) */
		cu_ok(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, cu_stream()), "upload");
		return;
	}
	for (size_t off = 0; off < bytes; off += STAGE_BYTES) {
		size_t n = bytes - off < STAGE_BYTES ? bytes - off : STAGE_BYTES;
		int i = G.next;
		G.next ^= 1;
		if (!cu_ok(cudaEventSynchronize(G.sent[i]), "upload (waiting for a staging buffer)"))
			return;
		memcpy(G.stage[i], (const uint8_t *)src + off, n);
		if (!cu_ok(cudaMemcpyAsync((uint8_t *)dst + off, G.stage[i], n, cudaMemcpyHostToDevice, cu_stream()),
			   "upload") ||
		    !cu_ok(cudaEventRecord(G.sent[i], cu_stream()), "upload (cudaEventRecord)"))
			return;
	}
}
