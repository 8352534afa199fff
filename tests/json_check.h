// json_check.h: a JSON Schema validator for the subset ft compiles into grammars
// (src/engine/json_schema.h), written for the tests from the specification (JSON Schema 2020-12,
// RFC 3339 for the formats): the truth constrained output is checked against. It knows the
// keywords' meaning, not how ft builds rules, and shares no code with the compiler.
#ifndef FT_TEST_JSON_CHECK_H
#define FT_TEST_JSON_CHECK_H

#include <jansson.h>
#include <stdbool.h>

// Whether v is valid under schema (root: the document "#..." references resolve in). Keywords
// outside the subset make it false (the tests never send them here).
bool json_check(json_t *root, json_t *schema, json_t *v);

#endif
