/* rad_grammar.h — JSON Schema (the subset OpenAI documents for Structured Outputs) and JSON mode
 * compiled to a byte-level automaton a sampler walks one byte at a time, so that the reply is
 * JSON that validates against the schema. A Thompson NFA over bytes is built from the schema;
 * a DFA is built from it lazily (a DFA state is the set of NFA states one can be in, made the
 * first time a byte reaches it, its transitions filled on demand and cached).
 *
 * What the automaton accepts:
 *   - exactly one JSON value, with no whitespace before or after it: right after the final '}'
 *     of an object reply rad_grammar_done() is 1. Between tokens (after '{' '[' ':' ',', before
 *     '}' ']') any run of space, \n, \r, \t is allowed; the caller limits runs.
 *   - strings: bytes >= 0x20 but '"' and '\', as well-formed UTF-8 (no overlongs, surrogates or
 *     code points past U+10FFFF); escapes \" \\ \/ \b \f \n \r \t and \uXXXX, where a \u high
 *     surrogate must be followed by a \u low surrogate and a lone low one is refused (what strict
 *     parsers, jansson among them, accept).
 *   - numbers -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?; "integer": -?(0|[1-9][0-9]*).
 *
 * The schema subset served (anything else is refused with RAD_E_ARG naming the keyword):
 *   - "type": object, array, string, number, integer, boolean, null, or an array of them. With
 *     no "type", a schema with object keywords is an object, with array keywords an array, and
 *     with neither any JSON value.
 *   - objects: "properties", "required", "additionalProperties" (absent or false only). Members
 *     are written in the order "properties" lists them, each key exactly as json.dumps writes it,
 *     each at most once; listed but not required ones may be left out. An object gets exactly
 *     its listed properties: what every validator accepts when additionalProperties is false,
 *     and a restriction (never a different meaning) when it is absent. No "properties": any JSON
 *     object (nesting at most 16 deep), or only {} when additionalProperties is false.
 *   - arrays: "items" (a schema), "minItems", "maxItems" (at most 256). No "items": any JSON
 *     values as items.
 *   - "enum" / "const": the values written exactly as Python's json.dumps writes them
 *     (rad_pyjson.h: ", " and ": " separators, 1.0 as "1.0"), so {"k": [1, 2]} must be written
 *     with those spaces; values that do not match a "type" next to them are dropped. At most
 *     10000 values and 1 MB of text.
 *   - "anyOf"; "$ref" to "#", "#/$defs/NAME", "#/definitions/NAME" or any JSON pointer into the
 *     root document. A recursive $ref is unrolled 4 levels deep; past that the recursive branch
 *     is left out where it is optional (an anyOf alternative, a property not required, an array
 *     item with minItems 0), and a recursion that cannot be left out is refused.
 *   - `true` or {}: any JSON value, nesting at most 16 deep.
 *   - annotations, accepted and ignored: title, description, default, examples, $schema, $id,
 *     $comment, strict, $defs, definitions, deprecated, readOnly, writeOnly.
 *   Refused: pattern, format, minLength, maxLength, minimum, maximum, exclusiveMinimum,
 *   exclusiveMaximum, multipleOf, minProperties, maxProperties, patternProperties,
 *   propertyNames, dependentRequired, if/then/else, uniqueItems, contains, prefixItems, not,
 *   allOf, oneOf (its exclusivity cannot be enforced), additionalProperties true or a schema,
 *   `false`, any unknown keyword, "$ref"/"enum"/"const"/"anyOf" next to other value keywords,
 *   nesting deeper than 64 levels, and schemas past 100000 NFA states ("schema too large").
 *
 * Nested "any JSON value" parts are expanded lazily, one nesting level at a time as the walk
 * enters them: an exact depth-bounded JSON language needs NFA states exponential in the depth
 * (one per stack of open brackets), so they are built only for the stacks a reply reaches.
 *
 * A RadGrammar is not thread-safe: stepping fills its caches. One request walks it at a time. */
#ifndef RAD_GRAMMAR_H
#define RAD_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

#include "libcommon/base/rad_err.h"

struct json_t;

typedef struct RadGrammar RadGrammar;

#define RAD_GRAMMAR_DEAD (-1) /* the byte cannot follow */
#define RAD_GRAMMAR_FULL (-2) /* the lazily built DFA hit its state limit: fail the request */

/* Compiles a JSON Schema. RAD_E_ARG (one-line message naming the keyword and where it is, e.g.
 * "schema.properties.city.pattern: 'pattern' is not served") when the schema is outside the
 * subset or too large; *param (cap bytes, may be NULL) gets the JSON path of the offending spot
 * relative to the schema root, like "properties.city.pattern" (or "" for the root). */
int rad_grammar_from_schema(const struct json_t *schema, RadGrammar **out, char *param, size_t cap, RadErr *e);
/* JSON mode: any JSON object (the top level must be an object), nesting at most max_depth deep
 * ({} is 1 deep, {"a": []} 2). max_depth 1..1024, else RAD_E_ARG. */
int rad_grammar_json_object(unsigned max_depth, RadGrammar **out, RadErr *e);
void rad_grammar_free(RadGrammar *g);

/* DFA states are int32 ids; the start state: */
int32_t rad_grammar_start(RadGrammar *g);
/* The state after byte b from state s: >= 0, or RAD_GRAMMAR_DEAD when b cannot follow (also
 * for s out of range), or RAD_GRAMMAR_FULL when the lazily built DFA hit its state limit (20000
 * states, or 500000 NFA states with the lazily expanded parts, or out of memory). A transition
 * computed once is a table lookup after. Every state reached can still complete a value. */
int32_t rad_grammar_step(RadGrammar *g, int32_t s, uint8_t b);
/* 1 when the bytes so far form a complete value (the output may end here). */
int rad_grammar_accepting(RadGrammar *g, int32_t s);
/* 1 when from s only the end can follow (accepting and no byte continues): the caller then
 * allows nothing but the end of the reply. */
int rad_grammar_done(RadGrammar *g, int32_t s);

/* For tests and diagnostics: lowers (or raises, up to 1 << 20) the DFA state limit; the DFA
 * states built so far, and the NFA's. */
void rad_grammar_set_dfa_cap(RadGrammar *g, int32_t n);
int32_t rad_grammar_n_dfa(const RadGrammar *g);
int32_t rad_grammar_n_nfa(const RadGrammar *g);

#endif
