/* rad_chat_calls: tool calls read out of a reply, at every chunk size (a stream's tokens cut
 * the markers anywhere), and what is not a call left as content. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "arch/common/rad_chat_formats.h"
#include "libcommon/text/rad_chat_calls.h"

static json_t *tools(void) {
    json_error_t je;
    json_t *t = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}},"
                           "{\"type\":\"function\",\"function\":{\"name\":\"now\"}}]", 0, &je);
    cr_assert_not_null(t, "%s", je.text);
    return t;
}

/* Feeds `text` cut every `step` bytes into a fresh reader; content to *content. */
static void read_calls(RadChatCalls *c, const json_t *t, uint32_t max, const char *text, size_t step, RadBuf *content) {
    RadErr e = {0};
    rad_chat_calls_init(c, &rad_chat_chatml_qwen, t, max);
    memset(content, 0, sizeof *content);
    const size_t n = strlen(text);
    for (size_t i = 0; i < n; i += step)
        cr_assert_eq(rad_chat_calls_feed(c, text + i, n - i < step ? n - i : step, content, &e), RAD_OK);
    cr_assert_eq(rad_chat_calls_flush(c, content, &e), RAD_OK);
}

Test(chat_calls, two_calls_and_content_at_every_chunk_size) {
    json_t *t = tools();
    const char *text = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"東京\", \"days\": 2.50}}\n"
                       "</tool_call>\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>\n";
    for (size_t step = 1; step <= strlen(text); step++) {
        RadChatCalls c;
        RadBuf content;
        read_calls(&c, t, 0, text, step, &content);
        cr_expect_str_eq(content.p, "Let me check.", "step %zu", step);
        cr_assert_eq(c.n, 2, "step %zu: %zu calls", step, c.n);
        cr_expect_str_eq(c.calls[0].name, "get_weather");
        cr_expect_str_eq(c.calls[0].arguments, "{\"city\": \"東京\", \"days\": 2.5}", "step %zu", step);
        cr_expect_str_eq(c.calls[1].name, "now");
        cr_expect_str_eq(c.calls[1].arguments, "{}");
        rad_chat_calls_free(&c);
        rad_buf_free(&content);
    }
    json_decref(t);
}

/* Not a call: JSON that does not parse, a function not offered, no name, no arguments; the
 * text goes to the content as written, markers included. */
Test(chat_calls, what_is_not_a_call_is_content) {
    json_t *t = tools();
    const char *bad[] = {
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }\n</tool_call>",
        "<tool_call>\n{\"name\": \"rm_rf\", \"arguments\": {}}\n</tool_call>",
        "<tool_call>\n{\"arguments\": {}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"now\"}\n</tool_call>",
        "<tool_call>\n[1, 2]\n</tool_call>",
        "<tool_call></tool_call>",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        for (size_t step = 1; step <= strlen(bad[i]); step += 3) {
            RadChatCalls c;
            RadBuf content;
            read_calls(&c, t, 0, bad[i], step, &content);
            cr_expect_eq(c.n, 0, "case %zu", i);
            cr_expect_str_eq(content.p, bad[i], "case %zu step %zu", i, step);
            rad_chat_calls_free(&c);
            rad_buf_free(&content);
        }
    }
    json_decref(t);
}

/* Cut off inside a call (max_tokens), a marker's beginning at the end, a reply without calls
 * keeps its white space, and arguments the model wrote as a JSON string. */
Test(chat_calls, cut_off_partial_markers_and_plain_replies) {
    json_t *t = tools();
    RadChatCalls c;
    RadBuf content;
    read_calls(&c, t, 0, "ok\n<tool_call>\n{\"name\": \"now\", \"argu", 4, &content);
    cr_expect_eq(c.n, 0);
    cr_expect_str_eq(content.p, "ok\n<tool_call>\n{\"name\": \"now\", \"argu");
    rad_chat_calls_free(&c);
    rad_buf_free(&content);
    read_calls(&c, t, 0, "a < b <tool_ca", 1, &content);
    cr_expect_str_eq(content.p, "a < b <tool_ca");
    rad_chat_calls_free(&c);
    rad_buf_free(&content);
    read_calls(&c, t, 0, "\n  Hello\n\n", 2, &content);
    cr_expect_str_eq(content.p, "\n  Hello\n\n");
    rad_chat_calls_free(&c);
    rad_buf_free(&content);
    read_calls(&c, t, 0, "<tool_call>{\"name\": \"now\", \"arguments\": \"{\\\"tz\\\": \\\"UTC\\\"}\"}</tool_call>", 5, &content);
    cr_assert_eq(c.n, 1);
    cr_expect_str_eq(c.calls[0].arguments, "{\"tz\": \"UTC\"}");
    cr_expect_str_eq(content.p, "");
    rad_chat_calls_free(&c);
    rad_buf_free(&content);
    json_decref(t);
}

/* parallel_tool_calls false: the first call only; no format markup: everything is content. */
Test(chat_calls, at_most_max_calls_and_no_markup) {
    json_t *t = tools();
    const char *text = "<tool_call>{\"name\": \"now\", \"arguments\": {}}</tool_call>\n<tool_call>{\"name\": \"get_weather\", "
                       "\"arguments\": {\"city\": \"Oslo\"}}</tool_call>";
    RadChatCalls c;
    RadBuf content;
    read_calls(&c, t, 1, text, 7, &content);
    cr_assert_eq(c.n, 1);
    cr_expect_str_eq(c.calls[0].name, "now");
    cr_expect_str_eq(content.p, "");
    rad_chat_calls_free(&c);
    rad_buf_free(&content);
    RadErr e = {0};
    rad_chat_calls_init(&c, &rad_chat_chatml_smollm, t, 0);
    memset(&content, 0, sizeof content);
    cr_assert_eq(rad_chat_calls_feed(&c, text, strlen(text), &content, &e), RAD_OK);
    cr_assert_eq(rad_chat_calls_flush(&c, &content, &e), RAD_OK);
    cr_expect_eq(c.n, 0);
    cr_expect_str_eq(content.p, text);
    rad_chat_calls_free(&c);
    rad_buf_free(&content);
    json_decref(t);
}

/* A reply that is only a call: fenced (Qwen2.5-Coder-1.5B's habit) or bare, at every chunk size;
 * a call whose end marker the model left out when it ended its turn; and look-alikes that stay
 * content: a fence with more after it, an object naming no offered function, a marked call's
 * neighbours. */
Test(chat_calls, bare_and_unclosed_calls) {
    json_t *t = tools();
    const char *calls[] = {
        "```json\n{\n  \"name\": \"get_weather\",\n  \"arguments\": {\n    \"city\": \"Paris\"\n  }\n}\n```",
        "\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n",
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\":  {\"city\": \"Paris\"}}",
    };
    for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++)
        for (size_t step = 1; step <= strlen(calls[i]); step++) {
            RadChatCalls c;
            RadBuf content;
            read_calls(&c, t, 0, calls[i], step, &content);
            cr_assert_eq(c.n, 1, "case %zu step %zu: content '%s'", i, step, content.p);
            cr_expect_str_eq(c.calls[0].arguments, "{\"city\": \"Paris\"}");
            cr_expect_str_eq(content.p, "", "case %zu step %zu", i, step);
            rad_chat_calls_free(&c);
            rad_buf_free(&content);
        }
    const char *content_only[] = {
        "```json\n{\"name\": \"get_weather\", \"arguments\": {}}\n```\nThat call would work.",
        "{\"name\": \"send_mail\", \"arguments\": {}}",
        "```json\n{\"a\": 1}\n```",
        "{\"name\": \"now\", \"arguments\": {}",
    };
    for (size_t i = 0; i < sizeof content_only / sizeof content_only[0]; i++)
        for (size_t step = 1; step <= strlen(content_only[i]); step += 5) {
            RadChatCalls c;
            RadBuf content;
            read_calls(&c, t, 0, content_only[i], step, &content);
            cr_expect_eq(c.n, 0, "case %zu", i);
            cr_expect_str_eq(content.p, content_only[i], "case %zu step %zu", i, step);
            rad_chat_calls_free(&c);
            rad_buf_free(&content);
        }
    json_decref(t);
}
