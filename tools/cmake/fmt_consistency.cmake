# One fmt for every target: the one spdlog was built against.
#
# pip torch wheels install their own fmt headers under <torch>/include/fmt, and that
# folder reaches every target as -isystem ahead of the system folders. Debian's spdlog
# is built against the system fmt (libfmt.so.9 on Debian 12), so spdlog's headers, and
# ours (error.h), would compile against torch's fmt and link against another: compile
# errors inside spdlog or undefined fmt::v1x symbols.
#
# tiergen_use_spdlog_fmt(<torch include dirs>) looks for fmt among LibTorch's include
# folders. When it finds one that is not spdlog's, it puts a folder holding only a link
# to spdlog's fmt/ first on every target's include path (-isystem BEFORE; never
# /usr/include itself, which would break libstdc++'s #include_next). It then compiles
# and links a probe (spdlog + error.h) with that include order and stops the configure,
# saying what to do, if the probe does not see spdlog's fmt.

set(TIERGEN_FMT_INCLUDE_DIR "" CACHE PATH
    "Folder holding the fmt/ headers spdlog was built against (default: from spdlog's fmt::fmt)")

set(_tiergen_fmt_probe_include ${CMAKE_CURRENT_LIST_DIR}/../../include)

# FMT_VERSION (e.g. 90100) of the fmt headers in <dir>/fmt, or "" when there are none.
function(tiergen_fmt_version dir out)
  set(version "")
  foreach(header base.h core.h)
    if(NOT version AND EXISTS ${dir}/fmt/${header})
      file(STRINGS ${dir}/fmt/${header} line REGEX "^#[ \t]*define[ \t]+FMT_VERSION[ \t]+[0-9]+")
      string(REGEX MATCH "[0-9]+$" version "${line}")
    endif()
  endforeach()
  set(${out} "${version}" PARENT_SCOPE)
  if(version)
    math(EXPR major "${version} / 10000")
    math(EXPR minor "${version} / 100 % 100")
    math(EXPR patch "${version} % 100")
    set(${out}_NAME "${major}.${minor}.${patch}" PARENT_SCOPE)
  endif()
endfunction()

# The include folder of the fmt spdlog uses: TIERGEN_FMT_INCLUDE_DIR, else fmt::fmt's
# (spdlog built with SPDLOG_FMT_EXTERNAL links it), else "" (spdlog's bundled fmt).
function(tiergen_spdlog_fmt_dir out)
  if(TIERGEN_FMT_INCLUDE_DIR)
    set(${out} ${TIERGEN_FMT_INCLUDE_DIR} PARENT_SCOPE)
    return()
  endif()
  set(dir "")
  if(TARGET fmt::fmt)
    get_target_property(dirs fmt::fmt INTERFACE_INCLUDE_DIRECTORIES)
    foreach(d ${dirs})
      if(NOT dir AND EXISTS ${d}/fmt/core.h)
        set(dir ${d})
      endif()
    endforeach()
  endif()
  set(${out} "${dir}" PARENT_SCOPE)
endfunction()

function(tiergen_use_spdlog_fmt)
  # The compiler's own folders (/usr/include: Debian's LibTorch lists it) hold the
  # system fmt, not a bundled one, and must never be passed as -isystem.
  set(torch_dirs "")
  foreach(d ${ARGN})
    if(NOT d IN_LIST CMAKE_CXX_IMPLICIT_INCLUDE_DIRECTORIES)
      list(APPEND torch_dirs ${d})
    endif()
  endforeach()
  set(torch_fmt_dir "")
  foreach(d ${torch_dirs})
    if(NOT torch_fmt_dir AND EXISTS ${d}/fmt/core.h)
      set(torch_fmt_dir ${d})
    endif()
  endforeach()
  if(NOT torch_fmt_dir)
    message(STATUS "tiergen: fmt: LibTorch's include folders hold no fmt; spdlog's fmt is the only one")
    return()
  endif()
  tiergen_fmt_version(${torch_fmt_dir} torch_version_number)
  set(torch_version "${torch_version_number_NAME}")
  tiergen_spdlog_fmt_dir(fmt_dir)
  if(fmt_dir)
    tiergen_fmt_version(${fmt_dir} fmt_version)
    if(NOT fmt_version)
      message(FATAL_ERROR "tiergen: fmt: LibTorch ships fmt ${torch_version} in ${torch_fmt_dir}/fmt, and "
        "${fmt_dir}/fmt (spdlog's fmt) holds no fmt headers. Point -DTIERGEN_FMT_INCLUDE_DIR at the folder "
        "whose fmt/ spdlog was built against (Debian: the libfmt-dev headers).")
    endif()
    set(spdlog_fmt "fmt ${fmt_version_NAME} in ${fmt_dir}/fmt")
  else()
    set(spdlog_fmt "its bundled fmt (spdlog/fmt/bundled)")
  endif()
  message(STATUS "tiergen: fmt: LibTorch ships fmt ${torch_version} in ${torch_fmt_dir}/fmt; "
                 "spdlog was built against ${spdlog_fmt}")

  set(first_dir "")
  if(fmt_dir AND NOT fmt_dir STREQUAL torch_fmt_dir)
    set(first_dir ${PROJECT_BINARY_DIR}/generated/fmt_first)
    file(REMOVE_RECURSE ${first_dir})
    file(MAKE_DIRECTORY ${first_dir})
    file(CREATE_LINK ${fmt_dir}/fmt ${first_dir}/fmt SYMBOLIC COPY_ON_ERROR)
    include_directories(BEFORE SYSTEM ${first_dir})
    message(STATUS "tiergen: fmt: ${first_dir} (a link to ${fmt_dir}/fmt) is searched before LibTorch's "
                   "include folders for every target")
  endif()

  # The probe sees the include order of the real targets: our folder first, then
  # LibTorch's (-isystem), then spdlog's usage requirements.
  set(probe ${PROJECT_BINARY_DIR}/generated/fmt_probe.cpp)
  set(expect_version "")
  if(fmt_version)
    set(expect_version "static_assert(FMT_VERSION == ${fmt_version}, \"not spdlog's fmt\");")
  endif()
  file(WRITE ${probe} "#include <spdlog/spdlog.h>\n#include \"tiergen/common/error.h\"\n${expect_version}\n"
    "int main() {\n  spdlog::info(\"{} {}\", fmt::format(\"{:>4}\", 1), std::string(\"probe\"));\n"
    "  try { TG_THROW(\"{}\", 2); } catch (const tiergen::Error&) { return 0; }\n  return 1;\n}\n")
  set(torch_flags "")
  foreach(d ${torch_dirs})
    list(APPEND torch_flags "-isystem${d}")
  endforeach()
  set(include_dirs ${first_dir} ${_tiergen_fmt_probe_include})
  try_compile(probe_ok ${PROJECT_BINARY_DIR}/generated/fmt_probe_build SOURCES ${probe}
    CMAKE_FLAGS "-DINCLUDE_DIRECTORIES=${include_dirs}"
    COMPILE_DEFINITIONS ${torch_flags}
    LINK_LIBRARIES spdlog::spdlog
    CXX_STANDARD 17
    OUTPUT_VARIABLE probe_output)
  if(NOT probe_ok)
    message(FATAL_ERROR "tiergen: fmt: a source including spdlog and error.h does not build against "
      "${spdlog_fmt} with LibTorch's fmt ${torch_version} (${torch_fmt_dir}/fmt) on the include path.\n"
      "Point -DTIERGEN_FMT_INCLUDE_DIR at the folder whose fmt/ spdlog was built against, or use an spdlog "
      "built against LibTorch's fmt. Compiler output:\n${probe_output}")
  endif()
  message(STATUS "tiergen: fmt: a probe with spdlog and error.h builds and links against ${spdlog_fmt}")
endfunction()
