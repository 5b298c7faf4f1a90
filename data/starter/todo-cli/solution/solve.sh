#!/bin/bash
cat > /app/todo.py <<'PY'
"""A to-do list kept in the JSON file named by $TODO_FILE (default /app/todo.json)."""
import json
import os
import sys

USAGE = "usage: todo.py COMMAND [ARGS...]"
PATH = os.environ.get("TODO_FILE", "/app/todo.json")


def load():
    try:
        with open(PATH) as f:
            return json.load(f)
    except FileNotFoundError:
        return {"next_id": 1, "tasks": []}


def save(state):
    tmp = PATH + ".tmp"
    with open(tmp, "w") as f:
        json.dump(state, f)
    os.replace(tmp, PATH)


def show(tasks):
    if not tasks:
        print("no tasks")
    for t in tasks:
        print(f"[{'x' if t['done'] else ' '}] {t['id']} {t['text']}")


def find(state, arg):
    task_id = int(arg)
    for t in state["tasks"]:
        if t["id"] == task_id:
            return t
    print(f"error: no task {task_id}", file=sys.stderr)
    sys.exit(1)


def main(argv):
    if not argv:
        raise ValueError
    state = load()
    cmd, args = argv[0], argv[1:]
    if cmd == "add" and args:
        text = " ".join(args)
        task = {"id": state["next_id"], "text": text, "done": False}
        state["next_id"] += 1
        state["tasks"].append(task)
        save(state)
        print(f"added {task['id']}: {text}")
    elif cmd == "list" and args in ([], ["--pending"]):
        show([t for t in state["tasks"] if not (args and t["done"])])
    elif cmd in ("done", "remove") and len(args) == 1:
        task = find(state, args[0])
        if cmd == "done":
            task["done"] = True
            print_line = f"completed {task['id']}"
        else:
            state["tasks"].remove(task)
            print_line = f"removed {task['id']}"
        save(state)
        print(print_line)
    elif cmd == "clear-done" and not args:
        before = len(state["tasks"])
        state["tasks"] = [t for t in state["tasks"] if not t["done"]]
        save(state)
        print(f"cleared {before - len(state['tasks'])}")
    elif cmd == "count" and not args:
        done = sum(t["done"] for t in state["tasks"])
        total = len(state["tasks"])
        print(f"{total} total, {done} done, {total - done} pending")
    else:
        raise ValueError


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except ValueError:
        print(USAGE, file=sys.stderr)
        sys.exit(2)
PY
