# sy_layer_include(TARGET FOLDER): the layer rule of docs/architecture.md. TARGET exports an
# include root of its own, <build>/include/<folder>_layer/, that holds a single symbolic link
# to the source folder under its own relative path (runtime -> <source>/runtime,
# io/fs -> <source>/io/fs). No target gets the repository root, so `#include "io/fs/x.h"`
# compiles only in a target that links the one that owns io/fs.
function(sy_layer_include target folder)
  string(REPLACE "/" "_" tag "${folder}")
  set(root ${CMAKE_BINARY_DIR}/include/${tag}_layer)
  get_filename_component(parent "${root}/${folder}" DIRECTORY)
  file(MAKE_DIRECTORY ${parent})
  file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${folder} ${root}/${folder} SYMBOLIC)
  target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${root}>)
endfunction()
