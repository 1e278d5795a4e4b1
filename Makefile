# Build ./run and the test tools; `make test` runs every test.
CC ?= gcc
CXX ?= g++
# Debian's interpreter: the one that sees python3-torch, python3-numpy and python3-sentencepiece.
PYTHON ?= /usr/bin/python3

CFLAGS ?= -O3 -march=native
CFLAGS += -std=c11 -Wall -Wextra -fopenmp -D_DEFAULT_SOURCE
CXXFLAGS ?= -O2
CXXFLAGS += -std=c++17 -Wall -Wextra
LDLIBS = -lsentencepiece -lstdc++ -lm -fopenmp

CORE = model.o rope.o kernels.o
TOOLS = tests/test_rope tests/rope_dump tests/dump_logits tests/tok_dump

all: run

run: run.o $(CORE) tokenizer.o
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

%.o: %.c *.h
	$(CC) $(CFLAGS) -c -o $@ $<

tokenizer.o: tokenizer.cpp tokenizer.h
	$(CXX) $(CXXFLAGS) -c -o $@ $<

tests/test_rope: tests/test_rope.c rope.o
	$(CC) $(CFLAGS) -I. -o $@ $^ -lm

tests/rope_dump: tests/rope_dump.c rope.o
	$(CC) $(CFLAGS) -I. -o $@ $^ -lm

tests/dump_logits: tests/dump_logits.c $(CORE)
	$(CC) $(CFLAGS) -I. -o $@ $^ -lm -fopenmp

tests/tok_dump: tests/tok_dump.c tokenizer.o
	$(CC) $(CFLAGS) -I. -o $@ $^ $(LDLIBS)

tools: run $(TOOLS)

test: tools
	./tests/test_rope
	$(PYTHON) -m pytest -q tests

clean:
	rm -f run *.o $(TOOLS)

.PHONY: all tools test clean
