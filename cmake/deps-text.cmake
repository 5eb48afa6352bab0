# deps-text.cmake — PCRE2 (Debian libpcre2-dev) for the tokenizer in src/text/.
#
# Required: GPT-2's pre-tokenizer splits text by Unicode letters and numbers (\p{L}, \p{N}),
# whose tables PCRE2 keeps up to date; found through pkg-config (libpcre2-8).
find_package(PkgConfig QUIET)
if(PkgConfig_FOUND)
  pkg_check_modules(ZERO_PCRE2_PC QUIET libpcre2-8)
endif()
find_path(ZERO_PCRE2_INCLUDE_DIR pcre2.h HINTS ${ZERO_PCRE2_PC_INCLUDE_DIRS})
find_library(ZERO_PCRE2_LIBRARY pcre2-8 HINTS ${ZERO_PCRE2_PC_LIBRARY_DIRS})
if(NOT ZERO_PCRE2_INCLUDE_DIR OR NOT ZERO_PCRE2_LIBRARY)
  message(FATAL_ERROR "zero: PCRE2 not found (install libpcre2-dev): the tokenizer needs it")
endif()
zero_dep_import(pcre2-8 ${ZERO_PCRE2_LIBRARY} ${ZERO_PCRE2_INCLUDE_DIR})
message(STATUS "zero: tokenizer regex on PCRE2 ${ZERO_PCRE2_PC_VERSION} (${ZERO_PCRE2_LIBRARY})")
