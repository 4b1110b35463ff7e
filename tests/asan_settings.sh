# The AddressSanitizer + UndefinedBehaviorSanitizer build and run settings, shared by
# tests/run_asan.sh (host LibTorch) and tools/check-libtorch2.sh with TIERGEN_TRIXIE_ASAN=1
# (LibTorch 2.6). Source this file. Any report fails the run: UBSan halts on the first
# error, ASan aborts on any memory error. The test sources themselves are compiled
# without instrumentation (TIERGEN_SANITIZE_TESTS=OFF, CMakeLists.txt says why): the
# library, tiergen and make-tiny-model are what the run checks.
# shellcheck disable=SC2034  # used by the scripts that source this file
asan_cmake_args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1"
                 -DTIERGEN_SANITIZE=address,undefined -DTIERGEN_SANITIZE_TESTS=OFF)
asan_options=detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=0:check_initialization_order=1
ubsan_options=halt_on_error=1:print_stacktrace=1
# The whole suite, the tests that measure this host's profile included: a sanitized
# build's profiles time small working sets (policy/profiler.cpp, kSanitizedBuild).
asan_gtest_filter='*'
