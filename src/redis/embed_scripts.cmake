# Embeds the Lua scripts into the library: each entry script is prefixed with lib.lua and written,
# with its SHA1 (what EVALSHA names it by), into a C++ source. Run as `cmake -P` with LIB, ENTRIES
# (a ;-list of name=path) and OUT.
file(READ "${LIB}" lib)
set(body "// Generated from src/redis/scripts/*.lua by embed_scripts.cmake. Do not edit.\n")
string(APPEND body "#include \"redis/scripts.h\"\n\nnamespace sluice::redis::detail {\n")
foreach(entry IN LISTS ENTRIES)
  string(REPLACE "=" ";" parts "${entry}")
  list(GET parts 0 name)
  list(GET parts 1 path)
  file(READ "${path}" main)
  set(source "${lib}\n${main}")
  string(SHA1 sha "${source}")
  string(APPEND body "\nconst Script ${name}{\"${sha}\", R\"sluice_lua(${source})sluice_lua\"};\n")
endforeach()
string(APPEND body "\n}  // namespace sluice::redis::detail\n")
file(WRITE "${OUT}.tmp" "${body}")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
