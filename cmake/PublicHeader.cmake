# cmake -DIN=<source header> -DOUT=<public header> -DMAP=<src=dst;...> -P PublicHeader.cmake
#
# Writes the public copy of a header (cmake/ShardyardInstall.cmake): the same text, with every
# #include "<folder>/<name>.h" of a public header spelled as its public name,
# #include "shardyard/<dst>". A public header that includes a header which is not public
# fails the build: the public API names public types only.
file(READ "${IN}" text)
foreach(pair IN LISTS MAP)
  string(REPLACE "=" ";" pair "${pair}")
  list(GET pair 0 src)
  list(GET pair 1 dst)
  set(public_${src} "${dst}")
endforeach()
string(REGEX MATCHALL "#include \"[^\"]+\"" includes "${text}")
foreach(inc IN LISTS includes)
  string(REGEX REPLACE "#include \"([^\"]+)\"" "\\1" path "${inc}")
  if(NOT DEFINED public_${path})
    message(FATAL_ERROR "${IN} includes ${path}, which is not a public header: the public API "
                        "names public types only (add it to SY_PUBLIC_HEADERS, or keep it out)")
  endif()
  string(REPLACE "${inc}" "#include \"shardyard/${public_${path}}\"" text "${text}")
endforeach()
file(WRITE "${OUT}" "${text}")
