/* memcpy's speed by the distance between destination and source modulo a
 * page, for one 16 KiB copy (a TLS record's plaintext) and for the same
 * bytes copied in pieces of 4 KiB, 2 KiB and 1 KiB (src/tls/stream/copy.rs).
 *
 *   gcc -O2 -static benches/memcpy_distance.c -o /tmp/memcpy_distance && /tmp/memcpy_distance
 *
 * Static, as the shipped binary is: it measures the glibc that binary
 * links. Prints GB/s per piece size and distance (both buffers hot in the
 * cache: what is measured is the copy alone).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(void) {
    char *src = aligned_alloc(4096, 1 << 20), *dst_base = aligned_alloc(4096, 1 << 20);
    memset(src, 1, 1 << 20);
    memset(dst_base, 2, 1 << 20);
    const long distances[] = {0, 1, 5, 16, 22, 31, 32, 64, 100, 256, 2048, 4091};
    const size_t pieces[] = {16384, 4096, 2048, 1024};
    const int n = 100000;
    printf("distance");
    for (size_t p = 0; p < sizeof pieces / sizeof *pieces; p++) printf("  piece %5zu", pieces[p]);
    printf("   (GB/s)\n");
    for (size_t i = 0; i < sizeof distances / sizeof *distances; i++) {
        printf("%8ld", distances[i]);
        for (size_t p = 0; p < sizeof pieces / sizeof *pieces; p++) {
            char *s = src + 8192, *d = dst_base + 8192 + distances[i];
            double t = now();
            for (int k = 0; k < n; k++) {
                for (size_t o = 0; o < 16384; o += pieces[p]) memcpy(d + o, s + o, pieces[p]);
                __asm__ volatile("" ::"r"(d) : "memory");
            }
            printf("  %11.1f", 16384.0 * n / (now() - t) / 1e9);
        }
        printf("\n");
    }
    return 0;
}
