"""One evolution round: the controller and the collaborators it calls in order (candidates, checks, screening and
evaluation, the control arm, grading, publication), the round's data model, power, and transfer after adoption."""
