"""Random and human reference scores for human-normalised Atari scores: (score - random) / (human - random).

Source: the random-agent and human-tester scores tabulated by Badia et al. (2020), "Agent57: Outperforming the
Atari Human Benchmark", appendix, which extend those of Mnih et al. (2015, Nature); they are the values used by
DQN Zoo (google-deepmind/dqn_zoo, dqn_zoo/atari_data.py) and by rliable's Atari results. Listed: the Atari-10 games
(Aitchison et al., 2023), which M25 evaluates on, and Breakout and SpaceInvaders, which the learning study of
ppo_atari_envpool.py adds (docs/ppo_atari_envpool.md#the-five-game-study).
"""
import re

ATARI_10 = ("Amidar", "BattleZone", "Bowling", "DoubleDunk", "Frostbite", "KungFuMaster", "NameThisGame", "Phoenix",
            "Qbert", "Riverraid")

# game: (random, human)
REFERENCE_SCORES = {
    "Amidar": (5.8, 1719.5),
    "BattleZone": (2360.0, 37187.5),
    "Bowling": (23.1, 160.7),
    "DoubleDunk": (-18.6, -16.4),
    "Frostbite": (65.2, 4334.7),
    "KungFuMaster": (258.5, 22736.3),
    "NameThisGame": (2292.3, 8049.0),
    "Phoenix": (761.4, 7242.6),
    "Qbert": (163.9, 13455.0),
    "Riverraid": (1338.5, 17118.0),
    "Breakout": (1.7, 30.5),
    "SpaceInvaders": (148.0, 1668.7),
}
_BY_KEY = {name.lower(): name for name in REFERENCE_SCORES}


def game_name(env_id: str) -> str:
    """'Amidar-v5', 'ALE/Amidar-v5', 'AmidarNoFrameskip-v4', 'amidar' -> 'Amidar'. KeyError if not a listed game."""
    base = env_id.split("/")[-1]
    base = re.sub(r"-v\d+$", "", base)
    base = re.sub(r"(NoFrameskip|Deterministic)$", "", base)
    key = base.replace("_", "").replace("-", "").lower()
    if key not in _BY_KEY:
        raise KeyError(env_id)
    return _BY_KEY[key]


def human_normalized(env_id: str, score):
    """(score - random) / (human - random): 0 is the random agent, 1 the human tester."""
    random_score, human_score = REFERENCE_SCORES[game_name(env_id)]
    return (score - random_score) / (human_score - random_score)
