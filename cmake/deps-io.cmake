# deps-io.cmake — liburing (Debian liburing-dev) for the swap I/O layer in src/io/.
#
# Optional: without it src/io builds with its pread/pwrite thread pool only (the same results,
# slower on fast disks), and says so here. With it, ZERO_HAVE_URING selects the io_uring engine,
# which still falls back to the pool at run time where the kernel refuses io_uring.
find_path(ZERO_URING_INCLUDE_DIR liburing.h)
find_library(ZERO_URING_LIBRARY uring)
if(ZERO_URING_INCLUDE_DIR AND ZERO_URING_LIBRARY)
  zero_dep_import(uring ${ZERO_URING_LIBRARY} ${ZERO_URING_INCLUDE_DIR})
  list(APPEND ZERO_DEP_DEFS ZERO_HAVE_URING=1)
  message(STATUS "zero: swap I/O on io_uring (${ZERO_URING_LIBRARY}), pread/pwrite pool as fallback")
else()
  message(WARNING "zero: liburing (liburing-dev) not found: swap I/O (src/io) builds with its "
                  "pread/pwrite thread pool only")
endif()
