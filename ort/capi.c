#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "capi.h"

static const OrtApiBase* api_base;
static const OrtApi* api;

const char* ortrain_init(const char* path) {
  if (api) return NULL;
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) return dlerror();
  const OrtApiBase* (*base)(void) = (const OrtApiBase* (*)(void))dlsym(h, "OrtGetApiBase");
  if (!base) return "the library has no OrtGetApiBase symbol: is it ONNX Runtime?";
  api_base = base();
  api = api_base->GetApi(ORT_API_VERSION);
  if (!api) return "the library is older than the ONNX Runtime C API version ortrain was built against";
  return NULL;
}

const char* ortrain_version(void) { return api_base ? api_base->GetVersionString() : ""; }


const char* ortrain_error_message(OrtStatus* s) { return api->GetErrorMessage(s); }
int ortrain_error_code(OrtStatus* s) { return (int)api->GetErrorCode(s); }
void ortrain_release_status(OrtStatus* s) { api->ReleaseStatus(s); }

OrtStatus* ortrain_create_env(int log_level, OrtEnv** out) {
  return api->CreateEnv((OrtLoggingLevel)log_level, "ortrain", out);
}

OrtStatus* ortrain_register_cpu_arena(OrtEnv* env, const char** keys, const size_t* values, size_t n, int replace) {
  OrtMemoryInfo* mi = NULL;
  OrtStatus* st = api->CreateCpuMemoryInfo(OrtArenaAllocator, OrtMemTypeDefault, &mi);
  if (st) return st;
  if (replace) {
    st = api->UnregisterAllocator(env, mi);
    if (st) {
      api->ReleaseMemoryInfo(mi);
      return st;
    }
  }
  OrtArenaCfg* cfg = NULL;
  st = api->CreateArenaCfgV2(keys, values, n, &cfg);
  if (!st) {
    st = api->CreateAndRegisterAllocator(env, mi, cfg);
    api->ReleaseArenaCfg(cfg);
  }
  api->ReleaseMemoryInfo(mi);
  return st;
}

OrtStatus* ortrain_available_providers(char*** out, int* n) { return api->GetAvailableProviders(out, n); }
void ortrain_release_providers(char** p, int n) { OrtStatus* s = api->ReleaseAvailableProviders(p, n); if (s) api->ReleaseStatus(s); }

OrtStatus* ortrain_create_session_options(OrtSessionOptions** out) { return api->CreateSessionOptions(out); }
void ortrain_release_session_options(OrtSessionOptions* o) { api->ReleaseSessionOptions(o); }

OrtStatus* ortrain_set_threads(OrtSessionOptions* o, int intra, int inter) {
  OrtStatus* s = api->SetIntraOpNumThreads(o, intra);
  if (s) return s;
  return api->SetInterOpNumThreads(o, inter);
}

OrtStatus* ortrain_disable_cpu_arena(OrtSessionOptions* o) { return api->DisableCpuMemArena(o); }

OrtStatus* ortrain_disable_mem_pattern(OrtSessionOptions* o) { return api->DisableMemPattern(o); }
OrtStatus* ortrain_session_log_fatal_only(OrtSessionOptions* o) { return api->SetSessionLogSeverityLevel(o, ORT_LOGGING_LEVEL_FATAL); }

OrtStatus* ortrain_set_graph_optimization(OrtSessionOptions* o, int level) {
  return api->SetSessionGraphOptimizationLevel(o, (GraphOptimizationLevel)level);
}

OrtStatus* ortrain_enable_profiling(OrtSessionOptions* o, const char* prefix) { return api->EnableProfiling(o, prefix); }

OrtStatus* ortrain_add_config(OrtSessionOptions* o, const char* key, const char* value) {
  return api->AddSessionConfigEntry(o, key, value);
}

OrtStatus* ortrain_append_cuda(OrtSessionOptions* o, const char** keys, const char** values, size_t n) {
  OrtCUDAProviderOptionsV2* cuda = NULL;
  OrtStatus* s = api->CreateCUDAProviderOptions(&cuda);
  if (s) return s;
  s = api->UpdateCUDAProviderOptions(cuda, keys, values, n);
  if (!s) s = api->SessionOptionsAppendExecutionProvider_CUDA_V2(o, cuda);
  api->ReleaseCUDAProviderOptions(cuda);
  return s;
}

OrtStatus* ortrain_create_session(OrtEnv* env, const void* data, size_t len, OrtSessionOptions* o, OrtSession** out) {
  return api->CreateSessionFromArray(env, data, len, o, out);
}
void ortrain_release_session(OrtSession* s) { api->ReleaseSession(s); }

OrtStatus* ortrain_io_count(OrtSession* s, int output, size_t* n) {
  return output ? api->SessionGetOutputCount(s, n) : api->SessionGetInputCount(s, n);
}

void ortrain_free(void* p) { free(p); }

// oom is the status of a failed allocation here.
static OrtStatus* oom(void) { return api->CreateStatus(ORT_FAIL, "ortrain: out of memory"); }

// dup_and_free copies s into malloc'd memory (NULL when that fails) and
// frees s with a.
static char* dup_and_free(OrtAllocator* a, char* s) {
  char* d = strdup(s);
  OrtStatus* st = api->AllocatorFree(a, s);
  if (st) api->ReleaseStatus(st);
  return d;
}

OrtStatus* ortrain_io_info(OrtSession* s, int output, size_t i, char** name, int* onnx_type,
                           int* elem, int64_t** dims, char*** symbolic, size_t* rank) {
  OrtAllocator* a = NULL;
  OrtStatus* st = api->GetAllocatorWithDefaultOptions(&a);
  if (st) return st;
  char* n = NULL;
  st = output ? api->SessionGetOutputName(s, i, a, &n) : api->SessionGetInputName(s, i, a, &n);
  if (st) return st;
  *name = dup_and_free(a, n);
  if (!*name) return oom();
  *dims = NULL;
  *symbolic = NULL;
  *rank = 0;
  *elem = 0;
  OrtTypeInfo* ti = NULL;
  st = output ? api->SessionGetOutputTypeInfo(s, i, &ti) : api->SessionGetInputTypeInfo(s, i, &ti);
  if (st) return st;
  enum ONNXType t;
  st = api->GetOnnxTypeFromTypeInfo(ti, &t);
  *onnx_type = (int)t;
  if (st || t != ONNX_TYPE_TENSOR) {
    api->ReleaseTypeInfo(ti);
    return st;
  }
  const OrtTensorTypeAndShapeInfo* tsi = NULL;
  st = api->CastTypeInfoToTensorInfo(ti, &tsi);
  if (!st) {
    enum ONNXTensorElementDataType et;
    st = api->GetTensorElementType(tsi, &et);
    *elem = (int)et;
  }
  if (!st) st = api->GetDimensionsCount(tsi, rank);
  if (!st && *rank > 0) {
    int64_t* d = calloc(*rank, sizeof(int64_t));
    const char** sym = calloc(*rank, sizeof(char*));
    char** names = calloc(*rank, sizeof(char*));
    if (d && sym && names) {
      st = api->GetDimensions(tsi, d, *rank);
      if (!st) st = api->GetSymbolicDimensions(tsi, sym, *rank);
    } else {
      st = oom();
    }
    for (size_t k = 0; !st && k < *rank; k++) {
      names[k] = strdup(sym[k] ? sym[k] : "");
      if (!names[k]) st = oom();
    }
    free(sym);
    if (st) {
      for (size_t k = 0; names && k < *rank; k++) free(names[k]);
      free(names);
      free(d);
    } else {
      *dims = d;
      *symbolic = names;
    }
  }
  api->ReleaseTypeInfo(ti);
  if (st) *rank = 0;  // the caller reads dims only for a rank
  return st;
}

OrtStatus* ortrain_ep_assignment(OrtSession* s, char** text) {
  const OrtEpAssignedSubgraph* const* subs = NULL;
  size_t n = 0;
  *text = NULL;
  OrtStatus* st = api->Session_GetEpGraphAssignmentInfo(s, &subs, &n);
  if (st) return st;
  size_t cap = 1024, len = 0;
  char* out = malloc(cap);
  if (!out) return oom();
  out[0] = 0;
  for (size_t i = 0; i < n && !st; i++) {
    const char* ep = NULL;
    const OrtEpAssignedNode* const* nodes = NULL;
    size_t nn = 0;
    st = api->EpAssignedSubgraph_GetEpName(subs[i], &ep);
    if (!st) st = api->EpAssignedSubgraph_GetNodes(subs[i], &nodes, &nn);
    for (size_t k = 0; k < nn && !st; k++) {
      const char *name = NULL, *domain = NULL, *op = NULL;
      st = api->EpAssignedNode_GetName(nodes[k], &name);
      if (!st) st = api->EpAssignedNode_GetDomain(nodes[k], &domain);
      if (!st) st = api->EpAssignedNode_GetOperatorType(nodes[k], &op);
      if (st) break;
      size_t need = strlen(ep) + strlen(name) + strlen(domain) + strlen(op) + 8;
      if (len + need >= cap) {
        while (len + need >= cap) cap *= 2;
        char* grown = realloc(out, cap);
        if (!grown) {
          st = oom();
          break;
        }
        out = grown;
      }
      len += snprintf(out + len, cap - len, "%s\t%s\t%s\t%s\n", ep, domain, op, name);
    }
  }
  *text = out;
  return st;
}

OrtStatus* ortrain_memory_info(const char* name, int id, int mem_type, OrtMemoryInfo** out) {
  return api->CreateMemoryInfo(name, OrtDeviceAllocator, id, (OrtMemType)mem_type, out);
}
void ortrain_release_memory_info(OrtMemoryInfo* m) { api->ReleaseMemoryInfo(m); }

OrtStatus* ortrain_create_allocator(OrtSession* s, OrtMemoryInfo* m, OrtAllocator** out) {
  return api->CreateAllocator(s, m, out);
}
void ortrain_release_allocator(OrtAllocator* a) { api->ReleaseAllocator(a); }
OrtStatus* ortrain_default_allocator(OrtAllocator** out) { return api->GetAllocatorWithDefaultOptions(out); }

OrtStatus* ortrain_allocator_stats(OrtAllocator* a, char** text) {
  *text = NULL;
  OrtKeyValuePairs* kv = NULL;
  OrtStatus* st = api->AllocatorGetStats(a, &kv);
  if (st) return st;
  const char* const* keys = NULL;
  const char* const* values = NULL;
  size_t n = 0;
  api->GetKeyValuePairs(kv, &keys, &values, &n);
  size_t len = 1;
  for (size_t i = 0; i < n; i++) len += strlen(keys[i]) + strlen(values[i]) + 2;
  char* out = malloc(len);
  if (!out) {
    api->ReleaseKeyValuePairs(kv);
    return oom();
  }
  char* w = out;
  for (size_t i = 0; i < n; i++) w += sprintf(w, "%s=%s\n", keys[i], values[i]);
  *w = 0;
  api->ReleaseKeyValuePairs(kv);
  *text = out;
  return NULL;
}

OrtStatus* ortrain_create_tensor(OrtAllocator* a, const int64_t* shape, size_t rank, int elem, OrtValue** out) {
  return api->CreateTensorAsOrtValue(a, shape, rank, (ONNXTensorElementDataType)elem, out);
}
void ortrain_release_value(OrtValue* v) { api->ReleaseValue(v); }

OrtStatus* ortrain_view_tensor(OrtValue* base, size_t byte_offset, size_t bytes, const int64_t* shape, size_t rank,
                               int elem, OrtValue** out) {
  const OrtMemoryInfo* m = NULL;
  OrtStatus* st = api->GetTensorMemoryInfo(base, &m);
  if (st) return st;
  void* data = NULL;
  if ((st = api->GetTensorMutableData(base, &data))) return st;
  return api->CreateTensorWithDataAsOrtValue(m, (char*)data + byte_offset, bytes, shape, rank,
                                             (ONNXTensorElementDataType)elem, out);
}
OrtStatus* ortrain_tensor_data(OrtValue* v, void** out) { return api->GetTensorMutableData(v, out); }

OrtStatus* ortrain_tensor_shape(OrtValue* v, int* elem, int64_t* dims, size_t max_rank, size_t* rank) {
  OrtTensorTypeAndShapeInfo* info = NULL;
  OrtStatus* st = api->GetTensorTypeAndShape(v, &info);
  if (st) return st;
  enum ONNXTensorElementDataType et;
  st = api->GetTensorElementType(info, &et);
  *elem = (int)et;
  if (!st) st = api->GetDimensionsCount(info, rank);
  if (!st && *rank <= max_rank) st = api->GetDimensions(info, dims, *rank);
  api->ReleaseTensorTypeAndShapeInfo(info);
  return st;
}

OrtStatus* ortrain_value_location(OrtValue* v, const char** name, int* id, int* mem_type) {
  const OrtMemoryInfo* m = NULL;
  OrtStatus* st = api->GetTensorMemoryInfo(v, &m);
  if (st) return st;
  st = api->MemoryInfoGetName(m, name);
  if (!st) st = api->MemoryInfoGetId(m, id);
  OrtMemType t = OrtMemTypeDefault;
  if (!st) st = api->MemoryInfoGetMemType(m, &t);
  *mem_type = (int)t;
  return st;
}

OrtStatus* ortrain_run(OrtSession* s, const char** in_names, OrtValue** in, size_t n_in,
                       const char** out_names, size_t n_out, OrtValue** out) {
  return api->Run(s, NULL, in_names, (const OrtValue* const*)in, n_in, out_names, n_out, out);
}

OrtStatus* ortrain_create_binding(OrtSession* s, OrtIoBinding** out) { return api->CreateIoBinding(s, out); }
void ortrain_release_binding(OrtIoBinding* b) { api->ReleaseIoBinding(b); }
OrtStatus* ortrain_bind_input(OrtIoBinding* b, const char* name, OrtValue* v) { return api->BindInput(b, name, v); }
OrtStatus* ortrain_bind_output(OrtIoBinding* b, const char* name, OrtValue* v) { return api->BindOutput(b, name, v); }
OrtStatus* ortrain_bind_output_to_device(OrtIoBinding* b, const char* name, OrtMemoryInfo* m) {
  return api->BindOutputToDevice(b, name, m);
}
void ortrain_clear_outputs(OrtIoBinding* b) { api->ClearBoundOutputs(b); }
OrtStatus* ortrain_run_binding(OrtSession* s, OrtIoBinding* b) { return api->RunWithBinding(s, NULL, b); }
OrtStatus* ortrain_sync_outputs(OrtIoBinding* b) { return api->SynchronizeBoundOutputs(b); }

OrtStatus* ortrain_bound_outputs(OrtIoBinding* b, OrtAllocator* a, OrtValue*** values, size_t* n) {
  return api->GetBoundOutputValues(b, a, values, n);
}
void ortrain_free_with(OrtAllocator* a, void* p) {
  OrtStatus* s = api->AllocatorFree(a, p);
  if (s) api->ReleaseStatus(s);
}
