#!/bin/bash
cat > /app/calc.py <<'PY'
import sys


def main(argv):
    op, a, b = argv[0], int(argv[1]), int(argv[2])
    if op == "add":
        print(a + b)
    elif op == "sub":
        print(a - b)
    elif op == "mul":
        print(a * b)
    elif op == "div":
        if b == 0:
            print("error: division by zero", file=sys.stderr)
            return 2
        print(f"{a / b:.2f}")
    else:
        print("error: unknown operation", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
PY
