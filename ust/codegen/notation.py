"""Index notation: an assignment as a sum of product terms, the compiler's input.

``C(i,j) = alpha * (A(i,k) + 2) * B(k,j) - D(i,j)`` is normalised (products distributed over
sums, literals folded, signs kept per term) into an :class:`IndexExpr` of :class:`Term`\\ s,
each a coefficient (sign, literal, named scalars) times a product of :class:`Factor`\\ s
(operand accesses).  This is TACO's and MLIR's starting point too: co-iteration is decided per
term (``*`` intersects), and the union of terms (``+``) is the merge.

Pure: it reads the grammar's trees and knows nothing of tensors.  The public front ends
(``ust.compute``, ``ust.einsum``) validate names, ranks and extents against it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ust.grammar import ast
from ust.grammar.parser import parse_compute
from ust.runtime.errors import UnsupportedError, UstSyntaxError

__all__ = ["MAX_TERMS", "Factor", "IndexExpr", "Term", "normalize", "parse_index_expr"]

#: Distributing products over sums can multiply terms; beyond this many the expression is refused.
MAX_TERMS = 64


@dataclass(frozen=True)
class Factor:
    """One operand access ``A(i, k)`` of a term."""

    operand: str
    indices: tuple[str, ...]

    def text(self) -> str:
        return f"{self.operand}({', '.join(self.indices)})"


@dataclass(frozen=True)
class Term:
    """``literal * scalars... * factors...`` (the literal carries the term's sign)."""

    literal: int | float = 1
    scalars: tuple[str, ...] = ()
    factors: tuple[Factor, ...] = ()

    @property
    def indices(self) -> tuple[str, ...]:
        """The term's index variables, in order of first appearance."""
        seen: dict[str, None] = {}
        for f in self.factors:
            for i in f.indices:
                seen.setdefault(i, None)
        return tuple(seen)

    def text(self) -> str:
        parts = [*self.scalars, *(f.text() for f in self.factors)]
        lit = self.literal
        if lit == 1 and parts:
            return " * ".join(parts)
        if lit == -1 and parts:
            return "-" + " * ".join(parts)
        return " * ".join([repr(lit), *parts])


@dataclass(frozen=True)
class IndexExpr:
    """``output(out_indices) = sum of terms``."""

    output: str
    out_indices: tuple[str, ...]
    terms: tuple[Term, ...]

    @property
    def operands(self) -> tuple[str, ...]:
        """Operand names in order of first appearance."""
        seen: dict[str, None] = {}
        for t in self.terms:
            for f in t.factors:
                seen.setdefault(f.operand, None)
        return tuple(seen)

    @property
    def scalars(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for t in self.terms:
            for s in t.scalars:
                seen.setdefault(s, None)
        return tuple(seen)

    @property
    def indices(self) -> tuple[str, ...]:
        """Every index variable: the output's first, then the others by first appearance."""
        seen: dict[str, None] = dict.fromkeys(self.out_indices)
        for t in self.terms:
            for i in t.indices:
                seen.setdefault(i, None)
        return tuple(seen)

    @property
    def has_subtraction(self) -> bool:
        return any(isinstance(t.literal, (int, float)) and t.literal < 0 for t in self.terms)

    def text(self) -> str:
        lhs = f"{self.output}({', '.join(self.out_indices)})" if self.out_indices else self.output
        rhs = ""
        for n, t in enumerate(self.terms):
            body = t.text()
            if n and body.startswith("-"):
                rhs += f" - {body[1:]}"
            else:
                rhs += (" + " if n else "") + body
        return f"{lhs} = {rhs or '0'}"


def _mul(a: Term, b: Term) -> Term:
    return Term(a.literal * b.literal, a.scalars + b.scalars, a.factors + b.factors)


def _terms(node: ast.TermAST) -> list[Term]:
    if isinstance(node, ast.AccessAST):
        return [Term(factors=(Factor(node.name, node.indices),))]
    if isinstance(node, ast.ScalarAST):
        return [Term(scalars=(node.name,))]
    if isinstance(node, ast.LiteralAST):
        return [Term(literal=node.value)]
    if isinstance(node, ast.NegAST):
        return [Term(-t.literal, t.scalars, t.factors) for t in _terms(node.operand)]
    if isinstance(node, ast.OpAST):
        left, right = _terms(node.left), _terms(node.right)
        if node.op == "+":
            out = left + right
        elif node.op == "-":
            out = left + [Term(-t.literal, t.scalars, t.factors) for t in right]
        else:
            out = [_mul(a, b) for a in left for b in right]
        if len(out) > MAX_TERMS:
            raise UnsupportedError(
                f"the expression expands to more than {MAX_TERMS} product terms; write it with fewer "
                "parenthesised sums (ust.codegen.notation.MAX_TERMS)"
            )
        return out
    raise TypeError(f"not an index-notation node: {node!r}")  # pragma: no cover


def _fold(terms: list[Term]) -> tuple[Term, ...]:
    """Literal-only terms are summed into one; zero-literal terms dropped."""
    out: list[Term] = []
    constant: int | float = 0
    has_constant = False
    for t in terms:
        if not t.factors and not t.scalars:
            constant += t.literal
            has_constant = True
        elif t.literal != 0:
            out.append(t)
    if has_constant and constant != 0:
        out.append(Term(literal=constant))
    return tuple(out)


def normalize(tree: ast.ComputeAST) -> IndexExpr:
    """The sum-of-products form of a parsed assignment."""
    lhs = tree.lhs
    if len(set(lhs.indices)) != len(lhs.indices):
        raise UstSyntaxError(
            f"line {lhs.line}, column {lhs.column}: the output {lhs.name} repeats an index "
            f"({', '.join(lhs.indices)}); each output index must be distinct",
            line=lhs.line,
            column=lhs.column,
        )
    return IndexExpr(lhs.name, lhs.indices, _fold(_terms(tree.rhs)))


def parse_index_expr(text: str) -> IndexExpr:
    """Parse and normalise ``text`` (``UstSyntaxError`` with line and column on bad syntax)."""
    return normalize(parse_compute(text))
