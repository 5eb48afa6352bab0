# deps-train.cmake — cJSON (Debian libcjson-dev) for the training config reader in src/train/.
#
# Required: `zero train` reads its configuration as JSON (DeepSpeed's schema plus our sections).
find_path(ZERO_CJSON_INCLUDE_DIR cJSON.h PATH_SUFFIXES cjson)
find_library(ZERO_CJSON_LIBRARY cjson)
if(NOT ZERO_CJSON_INCLUDE_DIR OR NOT ZERO_CJSON_LIBRARY)
  message(FATAL_ERROR "zero: cJSON not found (install libcjson-dev): the training config needs it")
endif()
zero_dep_import(cjson ${ZERO_CJSON_LIBRARY} ${ZERO_CJSON_INCLUDE_DIR})
message(STATUS "zero: JSON config on cJSON (${ZERO_CJSON_LIBRARY})")
