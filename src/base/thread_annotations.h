// Clang thread-safety annotations (no-ops on other compilers). Build with clang and
// -Wthread-safety to have the lock discipline checked.
#ifndef VLSTACK_BASE_THREAD_ANNOTATIONS_H_
#define VLSTACK_BASE_THREAD_ANNOTATIONS_H_

#if defined(__clang__)
#define VLS_THREAD_ANNOTATION_(x) __attribute__((x))
#else
#define VLS_THREAD_ANNOTATION_(x)
#endif

#define VLS_GUARDED_BY(x) VLS_THREAD_ANNOTATION_(guarded_by(x))
#define VLS_REQUIRES(...) VLS_THREAD_ANNOTATION_(requires_capability(__VA_ARGS__))
#define VLS_EXCLUDES(...) VLS_THREAD_ANNOTATION_(locks_excluded(__VA_ARGS__))

#endif  // VLSTACK_BASE_THREAD_ANNOTATIONS_H_
