# PCRE2 (8-bit code units), the regular expressions with Unicode properties that GPT-2's
# pre-tokenization pattern needs (xgrad/text/pretokenizer.cpp; std::regex has no \p{L}). Debian's
# libpcre2-dev ships pkg-config files but no CMake package, so the header and the library are
# found directly. Defines the imported target PCRE2::8 unless a project defined it already.
# Used by xgrad's build and by its installed package config (find_package(xgrad)).
if(NOT TARGET PCRE2::8)
  find_path(XGRAD_PCRE2_INCLUDE_DIR pcre2.h)
  find_library(XGRAD_PCRE2_LIBRARY NAMES pcre2-8)
  if(NOT XGRAD_PCRE2_INCLUDE_DIR OR NOT XGRAD_PCRE2_LIBRARY)
    message(FATAL_ERROR "xgrad needs PCRE2 (pcre2.h and libpcre2-8.so, for GPT-2's tokenizer in xgrad/text): "
                        "install it with `apt-get install libpcre2-dev` (or run scripts/setup.sh)")
  endif()
  add_library(PCRE2::8 UNKNOWN IMPORTED)
  set_target_properties(PCRE2::8 PROPERTIES
    IMPORTED_LOCATION "${XGRAD_PCRE2_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${XGRAD_PCRE2_INCLUDE_DIR}"
    INTERFACE_COMPILE_DEFINITIONS PCRE2_CODE_UNIT_WIDTH=8)
endif()
