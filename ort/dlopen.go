package ort

/*
#include <dlfcn.h>
#include <stdlib.h>
static int ortrain_can_dlopen(const char* name) {
  void* h = dlopen(name, RTLD_LAZY | RTLD_LOCAL);
  if (!h) return 0;
  dlclose(h);
  return 1;
}
*/
import "C"

import "unsafe"

// systemLibraryLoads reports whether the dynamic loader finds name on the
// system library path (LD_LIBRARY_PATH, ld.so.cache, default directories).
func systemLibraryLoads(name string) bool {
	c := C.CString(name)
	defer C.free(unsafe.Pointer(c))
	return C.ortrain_can_dlopen(c) == 1
}
