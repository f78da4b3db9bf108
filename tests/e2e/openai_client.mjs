// The official OpenAI Node client against a running `pagellm serve` (URL in argv[2], API key in
// argv[3]): completions, chat, streaming, n > 1, logprobs, structured output (validated with ajv)
// and error handling. Prints one line per
// check and ends with "N passed, N failed".
import OpenAI from "openai";
import Ajv from "ajv";
import { check, fail, finish, step } from "./checks.mjs";

const base = process.argv[2];
const key = process.argv[3];
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: key, maxRetries: 0, timeout: 60000 });
const REF = ", there was a little girl named Lily. She loved to play outside in the park. One day, " +
  "she saw a big, red ball. She wanted to play with it,";

await step("models", async () => {
  const list = await client.models.list();
  check("models: one model named stories", list.data.length === 1 && list.data[0].id === "stories", list.data);
});

await step("completion", async () => {
  const r = await client.completions.create({ model: "stories", prompt: "Once upon a time",
                                              max_tokens: 48, temperature: 0 });
  check("completion: reference text", r.choices[0].text === REF, r.choices[0].text);
  check("completion: usage", r.usage.completion_tokens === 48 && r.usage.prompt_tokens === 5, r.usage);
  check("completion: finish_reason", r.choices[0].finish_reason === "length");
});

await step("completion stream", async () => {
  const s = await client.completions.create({ model: "stories", prompt: "Once upon a time",
                                              max_tokens: 48, temperature: 0, stream: true,
                                              stream_options: { include_usage: true } });
  let text = "", usage = null, n = 0;
  for await (const c of s) {
    n++;
    if (c.choices.length) text += c.choices[0].text;
    if (c.usage) usage = c.usage;
  }
  check("completion stream: reference text", text === REF, text);
  check("completion stream: at least a text chunk and the usage chunk", n >= 2, n);
  check("completion stream: usage chunk", usage && usage.completion_tokens === 48, usage);
});

await step("completion n > 1 with logprobs", async () => {
  const r = await client.completions.create({ model: "stories", prompt: "Once upon a time",
                                              max_tokens: 6, temperature: 0.7, n: 2, seed: 3,
                                              logprobs: 2 });
  check("n = 2: two choices", r.choices.length === 2 &&
        r.choices.map((c) => c.index).sort().join() === "0,1", r.choices);
  const lp = r.choices[0].logprobs;
  check("logprobs: six tokens", lp.tokens.length === 6 && lp.token_logprobs.length === 6 &&
        lp.top_logprobs.length === 6 && lp.text_offset.length === 6, lp);
  check("logprobs: top dictionaries", lp.top_logprobs.every((d) => Object.keys(d).length >= 2 &&
        Object.values(d).every((v) => v <= 0)), lp.top_logprobs);
  check("logprobs: tokens join to the text", lp.tokens.join("") === r.choices[0].text);
});

await step("chat", async () => {
  const r = await client.chat.completions.create({
    model: "stories", max_tokens: 12, temperature: 0,
    messages: [{ role: "system", content: "You tell stories." }, { role: "user", content: "A story" }],
  });
  check("chat: assistant message", r.object === "chat.completion" &&
        r.choices[0].message.role === "assistant" && r.choices[0].message.content.length > 0, r);
  check("chat: usage", r.usage.completion_tokens === 12, r.usage);
});

await step("chat stream n = 2 with logprobs", async () => {
  const s = await client.chat.completions.create({
    model: "stories", max_tokens: 8, n: 2, stream: true, logprobs: true, top_logprobs: 3,
    messages: [{ role: "user", content: "Hello" }],
  });
  const text = ["", ""], fin = [null, null];
  let lpTokens = 0, roles = 0;
  for await (const c of s) {
    for (const ch of c.choices) {
      if (ch.delta.role === "assistant") roles++;
      text[ch.index] += ch.delta.content || "";
      if (ch.finish_reason) fin[ch.index] = ch.finish_reason;
      if (ch.logprobs && ch.logprobs.content) {
        lpTokens += ch.logprobs.content.length;
        check("chat stream: top_logprobs has 3", ch.logprobs.content.every((t) => t.top_logprobs.length === 3));
      }
    }
  }
  check("chat stream: a role chunk per choice", roles === 2, roles);
  check("chat stream: both choices finished", fin[0] === "length" && fin[1] === "length", fin);
  check("chat stream: 16 tokens with logprobs", lpTokens === 16, lpTokens);
});


// logit_bias through the client: -100 on the greedy first token bans it, +100 forces a token at
// every step (greedy or sampled); the ids come from the server's own /tokenize and /detokenize
// (which drops the leading space SentencePiece puts on a first piece: compared trimmed).
async function post(path, body) {
  const r = await fetch(`${base}${path}`, { method: "POST", body: JSON.stringify(body),
                                            headers: { "Content-Type": "application/json" } });
  return r.json();
}
await step("logit_bias", async () => {
  const t = await post("/tokenize", { prompt: "Once upon a time,", add_special_tokens: false });
  const comma = t.tokens[t.tokens.length - 1];
  const one = await post("/detokenize", { tokens: [comma] });
  check("logit_bias: ',' is one token", one.prompt === ",", one);
  const ban = await client.completions.create({ model: "stories", prompt: "Once upon a time",
                                                max_tokens: 8, temperature: 0,
                                                logit_bias: { [String(comma)]: -100 } });
  check("logit_bias -100: the greedy ',' is banned", !ban.choices[0].text.includes(","),
        ban.choices[0].text);
  const want = await post("/detokenize", { tokens: [300, 300, 300, 300] });
  for (const temperature of [0, 1]) {
    const r = await client.completions.create({ model: "stories", prompt: "Once upon a time",
                                                max_tokens: 4, temperature, seed: 5,
                                                logit_bias: { "300": 100 } });
    check(`logit_bias +100 forces token 300 (temperature ${temperature})`,
          r.choices[0].text.trim() === want.prompt.trim(), [r.choices[0].text, want.prompt]);
  }
  const c = await client.chat.completions.create({
    model: "stories", max_tokens: 3, temperature: 0, logit_bias: { "300": 100 },
    messages: [{ role: "user", content: "Hello" }] });
  const want3 = await post("/detokenize", { tokens: [300, 300, 300] });
  check("chat logit_bias +100", c.choices[0].message.content.trim() === want3.prompt.trim(),
        [c.choices[0].message.content, want3.prompt]);
});

async function expectError(what, status, fn, cls, param) {
  try {
    await fn();
    fail(`${what}: no error`);
  } catch (e) {
    check(`${what}: status ${status}`, e.status === status, e.status);
    check(`${what}: ${cls.name}`, e instanceof cls, e.constructor.name);
    check(`${what}: message`, typeof e.message === "string" && e.error && e.error.message, e.error);
    if (param !== undefined)
      check(`${what}: param ${param} and named in the message`, e.error && e.error.param === param &&
            e.error.message.includes(param), e.error);
  }
}

await expectError("unknown model", 404, () => client.completions.create(
  { model: "nope", prompt: "x", max_tokens: 2 }), OpenAI.NotFoundError, "model");
await expectError("unknown model in /v1/models/{id}", 404, () => client.models.retrieve("nope"),
  OpenAI.NotFoundError);
await step("models.retrieve", async () => {
  const m = await client.models.retrieve("stories");
  check("models.retrieve: the model", m.id === "stories" && m.object === "model", m);
});
await expectError("embeddings on a generation model", 400, () => client.embeddings.create(
  { model: "stories", input: "x" }), OpenAI.BadRequestError, "model");
await expectError("temperature out of range", 400, () => client.completions.create(
  { model: "stories", prompt: "x", temperature: 7 }), OpenAI.BadRequestError);
await expectError("empty messages", 400, () => client.chat.completions.create(
  { model: "stories", messages: [] }), OpenAI.BadRequestError);
await expectError("prompt too long", 400, () => client.completions.create(
  { model: "stories", prompt: Array(3000).fill(5), max_tokens: 2 }), OpenAI.BadRequestError);
await expectError("logit_bias out of range", 400, () => client.completions.create(
  { model: "stories", prompt: "x", logit_bias: { "5": 101 } }), OpenAI.BadRequestError, "logit_bias");
await expectError("logit_bias token id beyond the vocabulary", 400, () => client.completions.create(
  { model: "stories", prompt: "x", logit_bias: { "100000": 1 } }), OpenAI.BadRequestError, "logit_bias");
await expectError("logit_bias key not an id", 400, () => client.completions.create(
  { model: "stories", prompt: "x", logit_bias: { "abc": 1 } }), OpenAI.BadRequestError, "logit_bias");
await expectError("suffix is not supported", 400, () => client.completions.create(
  { model: "stories", prompt: "x", suffix: "y", max_tokens: 2 }), OpenAI.BadRequestError, "suffix");
// Tools: accepted and given to the chat template (stories260K has none: ChatML ignores them, so
// the answer is text); a tool-call round trip (assistant tool_calls, tool message) is rendered;
// tool_choice "required" needs constrained decoding and is refused. test_chat_template.sh checks
// what a tool-aware template receives and test_server_request.c the parsing of calls.
const tools = [{ type: "function", function: { name: "get_weather", description: "Weather",
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } }];
await step("tools are accepted", async () => {
  const r = await client.chat.completions.create({ model: "stories", max_tokens: 3, tools,
    tool_choice: "auto", messages: [{ role: "user", content: "Weather in Paris?" },
      { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function",
        function: { name: "get_weather", arguments: JSON.stringify({ city: "Paris" }) } }] },
      { role: "tool", tool_call_id: "call_1", content: "22C" }] });
  check("tools: a text answer", typeof r.choices[0].message.content === "string" &&
        !r.choices[0].message.tool_calls, r);
  const s = await client.chat.completions.create({ model: "stories", max_tokens: 3, tools,
    tool_choice: { type: "function", function: { name: "get_weather" } }, stream: true,
    messages: [{ role: "user", content: "x" }] });
  let text = "", fin = null;
  for await (const c of s) { text += c.choices[0]?.delta?.content ?? ""; fin = c.choices[0]?.finish_reason ?? fin; }
  check("tools, streamed: text and a finish reason", text.length > 0 && fin === "length", { text, fin });
});
await expectError("tool_choice required is not supported", 400, () => client.chat.completions.create(
  { model: "stories", messages: [{ role: "user", content: "x" }], tools, tool_choice: "required" }),
  OpenAI.BadRequestError, "tool_choice");
await expectError("tool_choice naming an unknown function", 400, () => client.chat.completions.create(
  { model: "stories", messages: [{ role: "user", content: "x" }], tools,
    tool_choice: { type: "function", function: { name: "nope" } } }), OpenAI.BadRequestError, "tool_choice");
// Structured output: every sample validates (ajv), matches the regex, is one of the choices.
const SCHEMA = {
  type: "object",
  properties: {
    name: { type: "string", maxLength: 12 },
    age: { type: "integer", minimum: 0, maximum: 120 },
    mood: { enum: ["happy", "sad", "angry"] },
    pets: { type: "array", items: { type: "string", maxLength: 8 }, maxItems: 3 },
    nick: { type: ["string", "null"], maxLength: 6 },
    home: { type: "object", properties: { town: { type: "string", pattern: "^[A-Z][a-z]{1,8}$" },
                                            big: { type: "boolean" } },
            required: ["town", "big"], additionalProperties: false },
  },
  required: ["name", "age", "mood", "pets", "nick", "home"],
  additionalProperties: false,
};
const validate = new Ajv({ strict: false }).compile(SCHEMA);
await step("response_format json_schema: 50 seeded samples at temperature 1 validate", async () => {
  const outs = [];
  for (let b = 0; b < 5; b++)
    outs.push(...await Promise.all(Array.from({ length: 10 }, (_, i) => client.chat.completions.create({
      model: "stories", messages: [{ role: "user", content: "Tell me about a child." }],
      temperature: 1, seed: 10 * b + i, max_tokens: 400,
      response_format: { type: "json_schema", json_schema: { name: "child", strict: true, schema: SCHEMA } },
    }))));
  let good = 0;
  const texts = new Set();
  for (const r of outs) {
    const c = r.choices[0];
    let v = null;
    try { v = JSON.parse(c.message.content); } catch (e) { /* counted below */ }
    if (c.finish_reason === "stop" && v !== null && validate(v)) good++;
    else console.log(`invalid: ${c.finish_reason} ${c.message.content} ${JSON.stringify(validate.errors)}`);
    texts.add(c.message.content);
  }
  check("json_schema: all 50 validate against the schema", good === 50, good);
  check("json_schema: the seeded samples differ", texts.size > 40, texts.size);
  const again = await client.chat.completions.create({
    model: "stories", messages: [{ role: "user", content: "Tell me about a child." }],
    temperature: 1, seed: 3, max_tokens: 400,
    response_format: { type: "json_schema", json_schema: { name: "child", schema: SCHEMA } } });
  check("json_schema: a seed reproduces its sample", again.choices[0].message.content ===
        outs[3].choices[0].message.content);
});
await step("response_format json_object", async () => {
  const r = await client.chat.completions.create({ model: "stories", temperature: 0.7, seed: 1, n: 4,
    max_tokens: 300, response_format: { type: "json_object" }, messages: [{ role: "user", content: "x" }] });
  for (const c of r.choices) {
    if (c.finish_reason !== "stop") continue; /* an object may be cut by max_tokens */
    let v = null;
    try { v = JSON.parse(c.message.content); } catch (e) { /* fails below */ }
    check("json_object: a JSON object", v !== null && typeof v === "object" && !Array.isArray(v), c.message.content);
  }
});
const REGEX = "(yes|no), [0-9]{1,3} (cats?|dogs?)\\.";
await step("guided_regex: 20 seeded samples match, n > 1, and streamed", async () => {
  const re = new RegExp(`^(?:${REGEX})$`);
  const rs = await Promise.all([0, 1].map((seed) => client.completions.create({
    model: "stories", prompt: "Once upon a time", temperature: 1, seed, n: 10, max_tokens: 40,
    guided_regex: REGEX })));
  const all = rs.flatMap((r) => r.choices);
  check("guided_regex: 20 samples", all.length === 20, all.length);
  check("guided_regex: every sample matches and stops", all.every((c) => re.test(c.text) &&
        c.finish_reason === "stop"), all.map((c) => c.text));
  const s = await client.completions.create({ model: "stories", prompt: "Lily", temperature: 1, seed: 5,
    max_tokens: 40, guided_regex: REGEX, stream: true });
  let text = "";
  for await (const c of s) if (c.choices.length) text += c.choices[0].text;
  check("guided_regex: streamed text matches", re.test(text), text);
});
await step("guided_choice: 20 seeded samples are choices", async () => {
  const CH = ["happy", "sad", "very angry", "Lily"];
  const rs = await Promise.all([0, 1].map((seed) => client.completions.create({
    model: "stories", prompt: "Tom felt", temperature: 1, seed, n: 10, max_tokens: 10,
    guided_choice: CH })));
  const all = rs.flatMap((r) => r.choices);
  check("guided_choice: every sample is a choice", all.length === 20 && all.every((c) => CH.includes(c.text)),
        all.map((c) => c.text));
  const g = await client.chat.completions.create({ model: "stories", temperature: 0, max_tokens: 10,
    messages: [{ role: "user", content: "x" }], structured_outputs: { choice: CH } });
  check("structured_outputs.choice (greedy, chat)", CH.includes(g.choices[0].message.content),
        g.choices[0].message.content);
});
await step("guided_grammar (GBNF)", async () => {
  const r = await client.completions.create({ model: "stories", prompt: "Once", temperature: 1, seed: 2,
    n: 5, max_tokens: 40, guided_grammar: 'root ::= "The " animal " is " ("big" | "small") "."\n' +
                                          'animal ::= "cat" | "dog" | [a-z]{3,5}' });
  check("guided_grammar: samples follow the grammar", r.choices.every((c) =>
        /^The [a-z]{3,5} is (big|small)\.$/.test(c.text)), r.choices.map((c) => c.text));
});
await expectError("invalid regex", 400, () => client.completions.create(
  { model: "stories", prompt: "x", guided_regex: "a(b" }), OpenAI.BadRequestError, "guided_regex");
await expectError("invalid grammar", 400, () => client.completions.create(
  { model: "stories", prompt: "x", guided_grammar: "root ::= nothere" }), OpenAI.BadRequestError, "guided_grammar");
await expectError("unsupported schema keyword", 400, () => client.chat.completions.create(
  { model: "stories", messages: [{ role: "user", content: "x" }], response_format: { type: "json_schema",
    json_schema: { name: "n", schema: { type: "integer", multipleOf: 3 } } } }), OpenAI.BadRequestError, "response_format");
await expectError("two constraints at once", 400, () => client.completions.create(
  { model: "stories", prompt: "x", guided_regex: "a", guided_choice: ["a"] }), OpenAI.BadRequestError, "guided_choice");
await step("response_format text is accepted", async () => {
  const r = await client.chat.completions.create({ model: "stories", max_tokens: 2,
    response_format: { type: "text" }, messages: [{ role: "user", content: "x" }] });
  check("response_format text: answered", r.choices.length === 1, r);
});
const bad = new OpenAI({ baseURL: `${base}/v1`, apiKey: "wrong", maxRetries: 0 });
await expectError("wrong API key", 401, () => bad.models.list(), OpenAI.AuthenticationError);

const r = await fetch(`${base}/health`);
check("health after the errors", r.status === 200, r.status);
finish();
