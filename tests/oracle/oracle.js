// oracle.js - the independent tokenizer the tests compare ours with: @lenml/tokenizers, a
// dependency-free copy of transformers.js's tokenizers (JavaScript, written apart from this
// project's C), reading the same tokenizer.json.
//
//   node oracle.js TOKENIZER.json [TOKENIZER_CONFIG.json] < requests.jsonl > answers.jsonl
//
// request: {"encode": [text, ...], "decode": [[id, ...], ...]}, one per line
// answer:  {"encode": [[id, ...], ...], "decode": [text, ...]}, one line for each request, written as
//          soon as its request line is read: a caller can keep the process, and the tokenizer it has
//          loaded, for many questions (tests/test_bpe.py does).
// Texts are encoded as Hugging Face's tokenizer(text, add_special_tokens=False) does: added and
// special tokens written in the text are matched, nothing is added around it. Ids are decoded
// with every token kept and no clean-up of spaces. Runs offline: tests/oracle/node_modules is
// installed by setup.sh (npm ci from package-lock.json).
"use strict";
const fs = require("fs");
const { TokenizerLoader } = require("@lenml/tokenizers");

const [json, config] = process.argv.slice(2);
const tokenizer = TokenizerLoader.fromPreTrained({
    tokenizerJSON: JSON.parse(fs.readFileSync(json, "utf8")),
    tokenizerConfig: config ? JSON.parse(fs.readFileSync(config, "utf8")) : {},
});
const readline = require("readline");
readline.createInterface({ input: process.stdin, crlfDelay: Infinity }).on("line", (line) => {
    if (!line.trim()) return;
    const request = JSON.parse(line);
    const answer = {
        encode: (request.encode || []).map((text) => tokenizer.encode(text, { add_special_tokens: false })),
        decode: (request.decode || []).map((ids) =>
            tokenizer.decode(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false })),
    };
    process.stdout.write(JSON.stringify(answer) + "\n");
});
