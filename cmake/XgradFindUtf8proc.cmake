# utf8proc, the Unicode normalization (NFC, NFD, NFKC, NFKD) that tokenizer.json normalizers ask for
# (xgrad/text/utf8.cpp): the Unicode tables come from a library made for them, not from copies of
# our own. Debian's libutf8proc-dev ships a pkg-config file but no CMake package, so the header
# and the library are found directly. Defines the imported target utf8proc::utf8proc unless a
# project defined it already. Used by xgrad's build and by its installed package config.
if(NOT TARGET utf8proc::utf8proc)
  find_path(XGRAD_UTF8PROC_INCLUDE_DIR utf8proc.h)
  find_library(XGRAD_UTF8PROC_LIBRARY NAMES utf8proc)
  if(NOT XGRAD_UTF8PROC_INCLUDE_DIR OR NOT XGRAD_UTF8PROC_LIBRARY)
    message(FATAL_ERROR "xgrad needs utf8proc (utf8proc.h and libutf8proc.so, for the Unicode normalizers of "
                        "tokenizer.json in xgrad/text): install it with `apt-get install libutf8proc-dev` "
                        "(or run scripts/setup.sh)")
  endif()
  add_library(utf8proc::utf8proc UNKNOWN IMPORTED)
  set_target_properties(utf8proc::utf8proc PROPERTIES
    IMPORTED_LOCATION "${XGRAD_UTF8PROC_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${XGRAD_UTF8PROC_INCLUDE_DIR}")
endif()
