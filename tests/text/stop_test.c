/* Streaming text: stop strings across token boundaries, held-back UTF-8, lossy output. */
#include <criterion/criterion.h>
#include <string.h>

#include "libcommon/text/rad_stop.h"

/* Pushes pieces; returns everything emitted (and whether a stop matched) in buf. */
static int run(RadStopText *t, const char *const *pieces, int n, char *buf, size_t cap, int flush) {
    size_t k = 0;
    int stopped = 0;
    buf[0] = 0;
    for (int i = 0; i < n; i++) {
        const char *o;
        size_t m;
        stopped = rad_stop_text_push(t, pieces[i], strlen(pieces[i]), &o, &m);
        cr_assert_lt(k + m, cap);
        memcpy(buf + k, o, m), k += m, buf[k] = 0;
    }
    if (flush) {
        const char *o;
        size_t m = rad_stop_text_flush(t, &o);
        memcpy(buf + k, o, m), k += m, buf[k] = 0;
    }
    return stopped;
}

Test(stoptext, a_stop_string_across_tokens_is_never_emitted) {
    RadStopText t;
    const char *stop[] = {"o W", "zzz"};
    RadErr e = {0};
    cr_assert_eq(rad_stop_text_init(&t, stop, 2, &e), RAD_OK);
    const char *p[] = {"Hel", "lo W", "orld"};
    char out[64];
    cr_assert_eq(run(&t, p, 3, out, sizeof out, 1), 1);
    cr_assert_str_eq(out, "Hell");
    rad_stop_text_free(&t);
}

Test(stoptext, a_partial_match_is_held_then_released) {
    RadStopText t;
    const char *stop[] = {"###"};
    RadErr e = {0};
    cr_assert_eq(rad_stop_text_init(&t, stop, 1, &e), RAD_OK);
    const char *o;
    size_t m;
    cr_assert_eq(rad_stop_text_push(&t, "a#", 2, &o, &m), 0);
    cr_assert_eq(m, 1);
    cr_assert_eq(memcmp(o, "a", 1), 0);
    cr_assert_eq(rad_stop_text_push(&t, "#", 1, &o, &m), 0);
    cr_assert_eq(m, 0, "'##' could still become the stop string");
    cr_assert_eq(rad_stop_text_push(&t, "b", 1, &o, &m), 0);
    cr_assert_eq(m, 3);
    cr_assert_eq(memcmp(o, "##b", 3), 0);
    rad_stop_text_free(&t);
}

Test(stoptext, the_earliest_of_several_stops_wins) {
    RadStopText t;
    const char *stop[] = {"world", "lo"};
    RadErr e = {0};
    cr_assert_eq(rad_stop_text_init(&t, stop, 2, &e), RAD_OK);
    const char *p[] = {"hello world"};
    char out[64];
    cr_assert_eq(run(&t, p, 1, out, sizeof out, 0), 1);
    cr_assert_str_eq(out, "hel");
    const char *o;
    size_t m;
    cr_assert_eq(rad_stop_text_push(&t, "more", 4, &o, &m), 1);
    cr_assert_eq(m, 0, "nothing after a stop");
    rad_stop_text_free(&t);
}

Test(stoptext, utf8_split_across_tokens_and_ill_formed_bytes) {
    RadStopText t;
    RadErr e = {0};
    cr_assert_eq(rad_stop_text_init(&t, NULL, 0, &e), RAD_OK);
    const char *o;
    size_t m;
    cr_assert_eq(rad_stop_text_push(&t, "caf\xc3", 4, &o, &m), 0);
    cr_assert_eq(m, 3, "the lead byte of é waits for its continuation");
    cr_assert_eq(rad_stop_text_push(&t, "\xa9!", 2, &o, &m), 0);
    cr_assert_eq(m, 3);
    cr_assert_eq(memcmp(o, "\xc3\xa9!", 3), 0);
    cr_assert_eq(rad_stop_text_push(&t, "x\xff", 2, &o, &m), 0);
    cr_assert_eq(m, 4);
    cr_assert_eq(memcmp(o, "x\xef\xbf\xbd", 4), 0, "an invalid byte becomes U+FFFD");
    cr_assert_eq(rad_stop_text_push(&t, "\xe2\x82", 2, &o, &m), 0);
    cr_assert_eq(m, 0);
    m = rad_stop_text_flush(&t, &o);
    cr_assert_eq(m, 3);
    cr_assert_eq(memcmp(o, "\xef\xbf\xbd", 3), 0, "an unfinished character at the end is U+FFFD");
    rad_stop_text_free(&t);
}

Test(stoptext, empty_stop_strings_are_ignored) {
    RadStopText t;
    const char *stop[] = {"", "END"};
    RadErr e = {0};
    cr_assert_eq(rad_stop_text_init(&t, stop, 2, &e), RAD_OK);
    cr_assert_eq(t.n_stop, 1);
    const char *p[] = {"abc", "EN", "D tail"};
    char out[64];
    cr_assert_eq(run(&t, p, 3, out, sizeof out, 1), 1);
    cr_assert_str_eq(out, "abc");
    rad_stop_text_free(&t);
}
