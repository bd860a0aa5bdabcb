# The installable library (docs/architecture.md, "Install"): `cmake --install BUILD --prefix P`
# puts the libraries in P/lib, the public headers in P/include/shardyard, the command line in
# P/bin, and a CMake package in P/lib/cmake/shardyard, so that an outside project does
#   find_package(shardyard REQUIRED)
#   target_link_libraries(app PRIVATE shardyard::shardyard)
# and includes <shardyard/loader.h>.
#
# The public headers are copies of the source headers below, generated into
# <build>/include/public/shardyard/ with their includes spelled <shardyard/NAME>
# (cmake/PublicHeader.cmake). The examples use that folder and nothing else, as an outside
# user does; a public header that includes a header not in the list fails the build.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# source header = public name
set(SY_PUBLIC_HEADERS
  actors/loader.h=loader.h
  actors/env.h=env.h
  io/fs/interface.h=file_system.h
  runtime/status.h=status.h
  runtime/clock.h=clock.h
  runtime/hash.h=hash.h
  runtime/thread_annotations.h=thread_annotations.h
  runtime/mutex.h=mutex.h
  runtime/buffer.h=buffer.h
  runtime/item.h=item.h
  runtime/batch.h=batch.h
  runtime/window.h=window.h
  runtime/sample_table.h=sample_table.h
  runtime/manifest.h=manifest.h
  runtime/pipeline.h=pipeline.h
  runtime/pipeline_cut.h=pipeline_cut.h
  runtime/shard.h=shard.h
  gpu/device.h=device.h
  gpu/device_pool.h=device_pool.h
  gpu/device_batch.h=device_batch.h
  gpu/dlpack.h=dlpack_export.h)

set(SY_PUBLIC_ROOT ${CMAKE_BINARY_DIR}/include/public)
set(public_files)
foreach(pair IN LISTS SY_PUBLIC_HEADERS)
  string(REPLACE "=" ";" parts "${pair}")
  list(GET parts 0 src)
  list(GET parts 1 dst)
  set(out ${SY_PUBLIC_ROOT}/shardyard/${dst})
  add_custom_command(
    OUTPUT ${out}
    COMMAND ${CMAKE_COMMAND} -DIN=${PROJECT_SOURCE_DIR}/${src} -DOUT=${out}
            "-DMAP=${SY_PUBLIC_HEADERS}" -P ${PROJECT_SOURCE_DIR}/cmake/PublicHeader.cmake
    DEPENDS ${PROJECT_SOURCE_DIR}/${src} ${PROJECT_SOURCE_DIR}/cmake/PublicHeader.cmake
    COMMENT "Public header shardyard/${dst}" VERBATIM)
  list(APPEND public_files ${out})
endforeach()
add_custom_target(shardyard_public_headers DEPENDS ${public_files})

# shardyard::shardyard: the public headers and every library, for a trainer. Its links are
# LINK_ONLY, so a consumer sees no include root of a layer, only <shardyard/...>. (The target
# is shardyard_lib here because `shardyard` is the command line's executable.)
add_library(shardyard_lib INTERFACE)
set_target_properties(shardyard_lib PROPERTIES EXPORT_NAME shardyard)
add_library(shardyard::shardyard ALIAS shardyard_lib)
add_dependencies(shardyard_lib shardyard_public_headers)
target_include_directories(shardyard_lib INTERFACE $<BUILD_INTERFACE:${SY_PUBLIC_ROOT}>
                           $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
target_link_libraries(shardyard_lib INTERFACE $<LINK_ONLY:shardyard_actors>)
target_compile_features(shardyard_lib INTERFACE cxx_std_17)
if(SY_SANITIZER_FLAGS)
  # A sanitized library needs the sanitizer's runtime in whatever links it.
  target_compile_options(shardyard_lib INTERFACE ${SY_SANITIZER_FLAGS})
  target_link_options(shardyard_lib INTERFACE ${SY_SANITIZER_FLAGS})
endif()

install(TARGETS shardyard_lib shardyard_actors shardyard_state shardyard_io shardyard_io_fs
                shardyard_io_format shardyard_io_remote shardyard_io_transport
                shardyard_io_persist shardyard_io_serve shardyard_gpu shardyard_runtime
        EXPORT shardyardTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS shardyard RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES ${public_files} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/shardyard)

set(SY_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/shardyard)
install(EXPORT shardyardTargets NAMESPACE shardyard:: DESTINATION ${SY_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/shardyardConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/shardyardConfig.cmake
                              INSTALL_DESTINATION ${SY_CMAKE_DIR})
# 0.x: a new minor version may change the API.
write_basic_package_version_file(${CMAKE_BINARY_DIR}/shardyardConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/shardyardConfig.cmake
              ${CMAKE_BINARY_DIR}/shardyardConfigVersion.cmake
              ${PROJECT_SOURCE_DIR}/cmake/FindCAF.cmake
        DESTINATION ${SY_CMAKE_DIR})
