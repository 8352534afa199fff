// json_schema: JSON Schema compiled into grammar rules (grammar.h), for structured output.
//
// The subset is OpenAI's structured outputs' and llama.cpp's common ground:
//   type            "object", "array", "string", "number", "integer", "boolean", "null", or a
//                   list of them (one alternative each); without "type", the keywords present
//                   say which (properties: object, items: array, ...), and none means any value
//   object          properties (emitted in the schema's order), required (names of properties),
//                   additionalProperties (absent or true: any further keys, after the declared
//                   ones, never a declared name; false: none; a schema: further keys' values)
//   array           items (one schema), minItems, maxItems
//   string          minLength, maxLength (in characters; an escape is one), format: "date",
//                   "time", "date-time" (RFC 3339: real calendar days, leap years included) and
//                   "uuid"; other formats are refused (with lenient: any string, logged)
//   integer         minimum, maximum, exclusiveMinimum, exclusiveMaximum (bounds on "number"
//                   are refused)
//   any type        enum, const (the values as jansson writes them compactly), anyOf, oneOf
//                   where no value can match two of its schemas (they differ in type, in enum
//                   or const values, or in such a value of a property both require: tagged
//                   unions; others are refused), allOf of one schema, $ref to "#" or a JSON
//                   pointer inside the document ($defs, definitions; recursion allowed)
//   annotations     title, description, default, examples, deprecated, readOnly, writeOnly,
//                   $comment, $schema, $id (at the root)
// Any other keyword is refused with its location (with lenient, ignored with a log line), and
// so are keywords that do not apply to the schema's type. Lengths and item counts above 10,000
// are refused.
// Objects' keys come in the schema's order (as OpenAI's structured outputs write them).
//
// White space between tokens is llama.cpp's: nothing, a space, or one or two newlines then up
// to 20 spaces or tabs. Numbers have at most 16 digits in their integer and fraction parts and
// 2 in the exponent (so every one fits a double); strings escape as JSON allows (\uXXXX
// surrogates only in pairs).
#ifndef FT_JSON_SCHEMA_H
#define FT_JSON_SCHEMA_H

#include "grammar.h"

#include <jansson.h>

// The JSON rules one builder shares between schemas (a tool call's grammar later holds several
// schemas and text around them).
typedef struct ft_json_rules ft_json_rules;

ft_json_rules *ft_json_rules_init(ft_gb *b, bool lenient);
void ft_json_rules_free(ft_json_rules *j); // NULL is a no-op

// The white space allowed between JSON tokens.
int ft_json_rules_ws(ft_json_rules *j);
// A rule matching the JSON values schema accepts (a schema object or a boolean; $ref resolves
// inside it). Returns -1 and sets *err ("at #/properties/x: what") for a schema ft cannot
// compile: a keyword outside the subset, a malformed or contradictory one, an unresolvable $ref.
int ft_json_rules_schema(ft_json_rules *j, json_t *schema, ft_err *err);
// A rule matching any JSON object (the json_object response format).
int ft_json_rules_any_object(ft_json_rules *j);

// The grammar of a whole reply: white space, a value schema accepts, white space. schema NULL:
// any JSON object. Returns NULL and sets *err as ft_json_rules_schema, or when the grammar
// fails its checks (a schema that refers to itself before any value is left-recursive).
ft_grammar *ft_json_schema_grammar(json_t *schema, bool lenient, ft_err *err);

#endif
