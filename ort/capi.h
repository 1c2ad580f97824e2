// ortrain's thin C layer over the ONNX Runtime C API: the parts the
// onnxruntime_go binding does not expose (IO binding, device memory, CUDA
// provider options, EP assignment). Every call returns an OrtStatus* that the
// Go side turns into an error and releases.
#ifndef ORTRAIN_CAPI_H
#define ORTRAIN_CAPI_H

#include <stddef.h>
#include <stdint.h>
#include "onnxruntime_c_api.h"

// ortrain_init loads the API table from the already-opened library at path.
// It returns NULL on success and an error text (static) otherwise.
const char* ortrain_init(const char* path);
// ortrain_version is the loaded library's version string.
const char* ortrain_version(void);
const char* ortrain_error_message(OrtStatus* s);
int ortrain_error_code(OrtStatus* s);
void ortrain_release_status(OrtStatus* s);

OrtStatus* ortrain_create_env(int log_level, OrtEnv** out);
// ortrain_register_cpu_arena gives env one CPU arena, configured by the
// CreateArenaCfgV2 keys and values, that sessions share when their options
// say session.use_env_allocators; with replace, the arena registered
// before goes (sessions holding it keep it).
OrtStatus* ortrain_register_cpu_arena(OrtEnv* env, const char** keys, const size_t* values, size_t n, int replace);
OrtStatus* ortrain_available_providers(char*** out, int* n);
void ortrain_release_providers(char** p, int n);

OrtStatus* ortrain_create_session_options(OrtSessionOptions** out);
void ortrain_release_session_options(OrtSessionOptions* o);
OrtStatus* ortrain_set_threads(OrtSessionOptions* o, int intra, int inter);
OrtStatus* ortrain_disable_cpu_arena(OrtSessionOptions* o);
OrtStatus* ortrain_disable_mem_pattern(OrtSessionOptions* o);
OrtStatus* ortrain_session_log_fatal_only(OrtSessionOptions* o);
OrtStatus* ortrain_set_graph_optimization(OrtSessionOptions* o, int level);
OrtStatus* ortrain_enable_profiling(OrtSessionOptions* o, const char* prefix);
OrtStatus* ortrain_add_config(OrtSessionOptions* o, const char* key, const char* value);
OrtStatus* ortrain_append_cuda(OrtSessionOptions* o, const char** keys, const char** values, size_t n);

OrtStatus* ortrain_create_session(OrtEnv* env, const void* data, size_t len, OrtSessionOptions* o, OrtSession** out);
void ortrain_release_session(OrtSession* s);
OrtStatus* ortrain_io_count(OrtSession* s, int output, size_t* n);
// ortrain_io_info describes input (output=0) or output (output=1) i. names
// and symbolic dims are freed by the caller with ortrain_free.
OrtStatus* ortrain_io_info(OrtSession* s, int output, size_t i, char** name, int* onnx_type,
                           int* elem, int64_t** dims, char*** symbolic, size_t* rank);
void ortrain_free(void* p);
OrtStatus* ortrain_ep_assignment(OrtSession* s, char** text);

OrtStatus* ortrain_memory_info(const char* name, int id, int mem_type, OrtMemoryInfo** out);
void ortrain_release_memory_info(OrtMemoryInfo* m);
OrtStatus* ortrain_create_allocator(OrtSession* s, OrtMemoryInfo* m, OrtAllocator** out);
void ortrain_release_allocator(OrtAllocator* a);
OrtStatus* ortrain_default_allocator(OrtAllocator** out);
// ortrain_allocator_stats writes a's statistics (AllocatorGetStats) as
// "key=value\n" lines into a malloc'd text freed with ortrain_free.
OrtStatus* ortrain_allocator_stats(OrtAllocator* a, char** text);

OrtStatus* ortrain_create_tensor(OrtAllocator* a, const int64_t* shape, size_t rank, int elem, OrtValue** out);
void ortrain_release_value(OrtValue* v);
// ortrain_view_tensor makes a tensor over bytes [byte_offset, byte_offset+bytes)
// of base's memory, wherever it lives; base keeps owning the memory.
OrtStatus* ortrain_view_tensor(OrtValue* base, size_t byte_offset, size_t bytes, const int64_t* shape, size_t rank,
                               int elem, OrtValue** out);
OrtStatus* ortrain_tensor_data(OrtValue* v, void** out);
OrtStatus* ortrain_tensor_shape(OrtValue* v, int* elem, int64_t* dims, size_t max_rank, size_t* rank);
OrtStatus* ortrain_value_location(OrtValue* v, const char** name, int* id, int* mem_type);

OrtStatus* ortrain_run(OrtSession* s, const char** in_names, OrtValue** in, size_t n_in,
                       const char** out_names, size_t n_out, OrtValue** out);

OrtStatus* ortrain_create_binding(OrtSession* s, OrtIoBinding** out);
void ortrain_release_binding(OrtIoBinding* b);
OrtStatus* ortrain_bind_input(OrtIoBinding* b, const char* name, OrtValue* v);
OrtStatus* ortrain_bind_output(OrtIoBinding* b, const char* name, OrtValue* v);
OrtStatus* ortrain_bind_output_to_device(OrtIoBinding* b, const char* name, OrtMemoryInfo* m);
void ortrain_clear_outputs(OrtIoBinding* b);
OrtStatus* ortrain_run_binding(OrtSession* s, OrtIoBinding* b);
OrtStatus* ortrain_sync_outputs(OrtIoBinding* b);
// ortrain_bound_outputs hands back the bound outputs; the caller owns the
// values and frees the array with ortrain_free_with(a, values).
OrtStatus* ortrain_bound_outputs(OrtIoBinding* b, OrtAllocator* a, OrtValue*** values, size_t* n);
void ortrain_free_with(OrtAllocator* a, void* p);

#endif
