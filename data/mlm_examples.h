// BERT examples from text: documents of lines (a text split at blank lines, or the KJV text of
// scripts/gpt-corpus.sh as chapters of verses), tokenized and packed into examples of at most
// max_length tokens, single segments or sentence pairs, for data/mlm.h to mask and batch.
// Leaves out: next-sentence prediction's random second segments and labels, sentence splitting
// within a line, and reading corpora other than plain text.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "data/bert_inputs.h"
#include "data/tokenizer.h"

namespace loom::data {

// Documents, each a list of lines (sentences, verses).
using Documents = std::vector<std::vector<std::string>>;

// A text's documents: blank lines (only whitespace) separate them, every other line (without its
// surrounding whitespace) is one line of the current document.
Documents documents_from_text(std::string_view text);
// The KJV text as scripts/gpt-corpus.sh writes it ("Genesis 1", a blank line, "  1 In the
// beginning ..."): one document per chapter, its verses the lines, without the verse numbers and
// the headings. An error names the line number of a line that is neither a heading, a verse nor
// blank.
Documents kjv_chapters(std::string_view text);

struct PackOptions {
  int64_t max_length = 128;  // of an example, [CLS] and [SEP]s included
  bool pairs = false;        // [CLS] A [SEP] B [SEP] examples instead of [CLS] A [SEP]
  SpecialTokens special = SpecialTokens::as_text();  // how lines are encoded: "[CLS]" is text
};

// Note [Packing lines]
// pack_documents encodes each line and packs a document's lines in order into chunks of at most
// max_length - 2 tokens (max_length - 3 for pairs): a line joins the current chunk when it fits,
// else starts the next one; a line longer than that is cut into pieces of that size, the last of
// which further lines may join. Chunks never cross documents, and lines are never cut otherwise
// (BERT's and RoBERTa's FULL-SENTENCES packing without crossing documents; the tail of a chunk is
// padding in the batch). With pairs, a chunk of two or more lines is split at the line boundary
// that brings A's length closest to half the chunk's (A and B at least one line each); a chunk of
// one line at its middle token (A takes the extra one). B always follows A in the text: what
// next-sentence prediction calls IsNext; loom draws no random B.
std::vector<BertInput> pack_documents(const Tokenizer& tokenizer, const Documents& documents,
                                      int32_t cls_id, int32_t sep_id,
                                      const PackOptions& options = {});
// The same from lines already encoded (a document's lines, in order).
std::vector<BertInput> pack_encoded(std::span<const std::vector<std::vector<int32_t>>> documents,
                                    int32_t cls_id, int32_t sep_id, const PackOptions& options);

}  // namespace loom::data
