// The target whose precompiled header the test binaries reuse (Note [Test header] in
// tests/CMakeLists.txt); it compiles nothing of its own.
