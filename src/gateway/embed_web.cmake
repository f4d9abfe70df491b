# Embeds the web console (web/) into the binary: every file under WEB becomes a byte array in a C++
# source (OUT), with its path and the SHA-256 of its bytes (the ETag). Run as `cmake -P` with WEB
# (the web/ directory) and OUT.
file(GLOB_RECURSE files RELATIVE "${WEB}" "${WEB}/*")
list(SORT files)

set(body "// Generated from web/ by src/gateway/embed_web.cmake. Do not edit.\n")
string(APPEND body "#include \"gateway/console.h\"\n\nnamespace sluice::gateway {\nnamespace {\n")
set(table "")
set(index 0)
foreach(file IN LISTS files)
  file(READ "${WEB}/${file}" hex HEX)
  file(SHA256 "${WEB}/${file}" sha)
  file(SIZE "${WEB}/${file}" size)
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
  # One line per 64 bytes keeps the source readable by tools.
  string(REGEX REPLACE "((0x..,){64})" "\\1\n" bytes "${bytes}")
  string(APPEND body "\nconst unsigned char kFile${index}[] = {\n${bytes}0};\n")
  string(APPEND table "    {\"/${file}\", {reinterpret_cast<const char*>(kFile${index}), ${size}}, \"${sha}\"},\n")
  math(EXPR index "${index} + 1")
endforeach()
string(APPEND body "\n}  // namespace\n\nstd::span<const WebAsset> web_assets() {\n")
string(APPEND body "  static const WebAsset kAssets[] = {\n${table}  };\n  return kAssets;\n}\n")
string(APPEND body "\n}  // namespace sluice::gateway\n")
file(WRITE "${OUT}.tmp" "${body}")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
