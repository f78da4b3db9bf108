// The official OpenAI Node client's embeddings.create against `pagellm serve` running a random
// BERT made by `pagellm mkmodel` with the flags of tests/data/embeddings/bert-mean-f32.json
// (argv: URL, API key, that JSON, the served name), or stories260K served with --pooling
// (stories260K-last.json, name "stories": a generation model that also embeds). Checks: a batch of inputs matches llama.cpp's embeddings
// within 1e-4 and equals, bit for bit, the same inputs sent one request each; the client's
// default (base64) and encoding_format "float" give the same numbers; token-id inputs; usage;
// the 400s (empty input, empty string, mixed kinds, id out of range, dimensions, too long,
// completions on an embedding model). Prints one line per failure, then "N passed, N failed".
import OpenAI from "openai";
import fs from "fs";
import { check, fail, finish, step } from "./checks.mjs";

const [base, key, refPath, served] = process.argv.slice(2);
const ref = JSON.parse(fs.readFileSync(refPath, "utf8"));
const cases = ref.cases.filter((c) => c.embedding);
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: key, maxRetries: 0, timeout: 60000 });
const model = served || "bert";
const generation = !ref.mkmodel; /* stories260K with --pooling: it still generates */
const maxDiff = (a, b) => a.reduce((m, v, i) => Math.max(m, Math.abs(v - b[i])), 0);
const same = (a, b) => a.length === b.length && a.every((v, i) => Object.is(v, b[i]));

let batch = null;
await step("batch", async () => {
  const r = await client.embeddings.create({ model, input: cases.map((c) => c.text) });
  check("batch: list of embeddings", r.object === "list" && r.data.length === cases.length &&
        r.data.every((d, i) => d.object === "embedding" && d.index === i), r.data.length);
  check("batch: model", r.model === model, r.model);
  const tokens = cases.reduce((n, c) => n + c.ids.length, 0);
  check("batch: usage", r.usage.prompt_tokens === tokens && r.usage.total_tokens === tokens, r.usage);
  let worst = 0;
  r.data.forEach((d, i) => { worst = Math.max(worst, maxDiff(d.embedding, cases[i].embedding)); });
  console.log(`max |pagellm - llama.cpp| over ${cases.length} embeddings: ${worst.toExponential(2)}`);
  check("batch: within 1e-4 of llama.cpp", worst <= 1e-4, worst);
  check("batch: unit norm", r.data.every((d) =>
    Math.abs(Math.hypot(...d.embedding) - 1) < 1e-5));
  batch = r.data.map((d) => d.embedding);
});

await step("single requests equal the batch", async () => {
  const singles = await Promise.all(cases.map((c) => client.embeddings.create({ model, input: c.text })));
  check("single: bitwise equal to the batch", batch && singles.every((r, i) =>
    r.data.length === 1 && same(r.data[0].embedding, batch[i])));
});

await step("a batch larger than the server's queue bound", async () => {
  const texts = [...cases, ...cases, ...cases].map((c) => c.text);
  const r = await client.embeddings.create({ model, input: texts });
  check("18 inputs: each equals the first batch's", batch && r.data.length === texts.length &&
        r.data.every((d, i) => d.index === i && same(d.embedding, batch[i % cases.length])));
});

await step("encoding_format float", async () => {
  const r = await client.embeddings.create({ model, input: cases[0].text, encoding_format: "float" });
  check("float: equals base64", batch && same(r.data[0].embedding, batch[0]));
});

await step("token ids", async () => {
  const r = await client.embeddings.create({ model, input: [cases[0].ids, cases[1].ids] });
  check("ids: two embeddings equal to the text's", batch && r.data.length === 2 &&
        same(r.data[0].embedding, batch[0]) && same(r.data[1].embedding, batch[1]));
  const one = await client.embeddings.create({ model, input: cases[1].ids });
  check("ids: one list", batch && same(one.data[0].embedding, batch[1]));
});

async function expectError(what, fn, param) {
  try {
    await fn();
    fail(`${what}: no error`);
  } catch (e) {
    check(`${what}: 400 BadRequestError`, e.status === 400 && e instanceof OpenAI.BadRequestError,
          [e.status, e.constructor.name]);
    if (param !== undefined)
      check(`${what}: param ${param} named in the message`, e.error && e.error.param === param &&
            e.error.message.includes(param), e.error);
  }
}
await expectError("empty list", () => client.embeddings.create({ model, input: [] }), "input");
await expectError("empty string", () => client.embeddings.create({ model, input: "" }), "input");
await expectError("empty string in a list", () =>
  client.embeddings.create({ model, input: ["a", ""] }), "input");
await expectError("mixed kinds", () => client.embeddings.create({ model, input: ["a", [5]] }), "input");
await expectError("token id out of range", () =>
  client.embeddings.create({ model, input: [5, 1000000] }), "input");
await expectError("dimensions", () =>
  client.embeddings.create({ model, input: "a", dimensions: 8 }), "dimensions");
await expectError("too long", () =>
  client.embeddings.create({ model, input: Array(600).fill(5) }), "input");
if (generation) {
  await step("completions still work beside embeddings", async () => {
    const [c, e] = await Promise.all([
      client.completions.create({ model, prompt: "Once upon a time", max_tokens: 8, temperature: 0 }),
      client.embeddings.create({ model, input: cases[0].text })]);
    check("completion beside an embedding", c.choices[0].text === ", there was a little girl",
          c.choices[0].text);
    check("embedding beside a completion: bitwise the same", batch && same(e.data[0].embedding, batch[0]));
  });
} else {
  await expectError("completions on an embedding model", () =>
    client.completions.create({ model, prompt: "x", max_tokens: 2 }));
}

const h = await fetch(`${base}/health`);
check("health after the errors", h.status === 200, h.status);
finish();
