# Embeds the Lua scripts into the library: each script is the concatenation of scripts/*.lua files
# listed below, written with its SHA1 (what EVALSHA names it by) into a C++ source. Run as
# `cmake -P` with SCRIPTS (the scripts/ directory) and OUT.
# Lua defines every function of a script anew on each call, so each script takes only the files it
# uses: common.lua, how states are kept (states_cached.lua or states_direct.lua), then the helpers
# (muldiv.lua, batches.lua), the algorithms and an entry.
set(all_algorithms common.lua states_cached.lua muldiv.lua batches.lua meter.lua interval.lua
    fixed.lua sliding.lua log.lua leases.lua dispatch.lua)

set(body "// Generated from src/redis/scripts/*.lua by embed_scripts.cmake. Do not edit.\n")
string(APPEND body "#include \"redis/scripts.h\"\n\nnamespace sluice::redis::detail {\n")

# The Redis 7 function library: every algorithm once, then library.lua, then each entry that uses
# them all as a function (FCALL), which Redis defines once, at FUNCTION LOAD, rather than at each
# call. The library and its functions are named by the library's SHA1, so that two versions of
# sluice in a fleet being upgraded each call their own.
set(library_entries acquire many refund)
set(library "local KEYS, ARGV\n")
foreach(file IN LISTS all_algorithms ITEMS library.lua)
  file(READ "${SCRIPTS}/${file}" text)
  string(APPEND library "${text}")
endforeach()
foreach(entry IN LISTS library_entries)
  file(READ "${SCRIPTS}/${entry}.lua" text)
  string(APPEND library "\nredis.register_function('sluice_${entry}_@ID@', function(keys, args)\n"
         "begin(keys, args)\n${text}end)\n")
endforeach()
string(SHA1 library_sha "${library}")
string(SUBSTRING "${library_sha}" 0 12 library_id)
string(REPLACE "@ID@" "${library_id}" library "${library}")
string(APPEND body "\nconst char* const kLibrary = R\"sluice_lua(#!lua name=sluice_${library_id}\n${library})sluice_lua\";\n")

# add_script(<C++ name> <files...> [ONE <algorithm> <params>]): ONE appends one.lua with its
# @ALG@ and @PARAMS@ filled in.
function(add_script name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "FUNCTION" "ONE")
  set(source "")
  foreach(file IN LISTS arg_UNPARSED_ARGUMENTS)
    file(READ "${SCRIPTS}/${file}" text)
    string(APPEND source "${text}")
  endforeach()
  if(arg_ONE)
    list(GET arg_ONE 0 algorithm)
    list(GET arg_ONE 1 params)
    file(READ "${SCRIPTS}/one.lua" text)
    string(REPLACE "@ALG@" "${algorithm}" text "${text}")
    string(REPLACE "@PARAMS@" "${params}" text "${text}")
    string(APPEND source "${text}")
  endif()
  string(SHA1 sha "${source}")
  set(function "nullptr")
  if(arg_FUNCTION)
    set(function "\"sluice_${arg_FUNCTION}_${library_id}\"")
  endif()
  string(APPEND body "\nconst Script ${name}{\"${sha}\", R\"sluice_lua(${source})sluice_lua\", ${function}};\n")
  set(body "${body}" PARENT_SCOPE)
endfunction()

add_script(kAcquireScript ${all_algorithms} acquire.lua FUNCTION acquire)
add_script(kAcquireManyScript ${all_algorithms} many.lua FUNCTION many)
add_script(kRefundScript ${all_algorithms} refund.lua FUNCTION refund)
add_script(kReleaseScript common.lua states_direct.lua batches.lua leases.lua release.lua)
add_script(kAcquireMeterScript common.lua states_direct.lua muldiv.lua meter.lua ONE meter meter)
add_script(kAcquireIntervalScript common.lua states_direct.lua interval.lua ONE interval interval)
add_script(kAcquireFixedScript common.lua states_direct.lua fixed.lua ONE fixed window)
add_script(kAcquireSlidingScript common.lua states_direct.lua muldiv.lua sliding.lua ONE sliding window)
add_script(kAcquireLogScript common.lua states_direct.lua batches.lua log.lua ONE log window)
add_script(kAcquireLeasesScript common.lua states_direct.lua batches.lua leases.lua ONE leases leases)

string(APPEND body "\n}  // namespace sluice::redis::detail\n")
file(WRITE "${OUT}.tmp" "${body}")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
