# oneDNN found by its header and library instead of its CMake package config. Debian 12's
# libdnnl-dev was built with the OpenCL GPU runtime, so its dnnl-config.cmake calls
# find_package(OpenCL REQUIRED): a CPU-only user would need OpenCL's development files just to
# configure. xgrad calls only the CPU API of dnnl.h (libdnnl.so links libOpenCL.so.1 itself), so
# the header and the library are all it needs. Defines the imported target DNNL::dnnl, the name
# oneDNN's own config uses, unless a project that found oneDNN its own way defined it already.
# Used by xgrad's build and by its installed package config (find_package(xgrad)).
if(NOT TARGET DNNL::dnnl)
  find_path(XGRAD_DNNL_INCLUDE_DIR dnnl.h)
  find_library(XGRAD_DNNL_LIBRARY NAMES dnnl)
  if(NOT XGRAD_DNNL_INCLUDE_DIR OR NOT XGRAD_DNNL_LIBRARY)
    message(FATAL_ERROR "xgrad needs oneDNN (dnnl.h and libdnnl.so): install it with "
                        "`apt-get install libdnnl-dev` (or run scripts/setup.sh)")
  endif()
  add_library(DNNL::dnnl UNKNOWN IMPORTED)
  set_target_properties(DNNL::dnnl PROPERTIES
    IMPORTED_LOCATION "${XGRAD_DNNL_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${XGRAD_DNNL_INCLUDE_DIR}")
endif()
